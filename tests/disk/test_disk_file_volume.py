"""FileVolume on sparse files and on a block device."""

from __future__ import annotations

import errno
import mmap
import os
import random
import threading

import pytest
from page_cache import cached_pages

from diskferry.disk.copy import copy
from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent
from diskferry.disk.file_volume import DIRECT_ALIGN, FileVolume, is_block_device, takes_direct_io

MiB = 1 << 20


def sparse_file(path, size: int, runs: list[tuple[int, bytes]]) -> None:
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in runs:
            f.seek(offset)
            f.write(data)


def test_extents_follow_holes_and_data(tmp_path):
    path = tmp_path / "disk"
    sparse_file(path, 8 * MiB, [(MiB, b"a" * MiB), (5 * MiB, b"b" * 4096)])
    with FileVolume(path) as vol:
        assert vol.size == 8 * MiB
        assert list(vol.extents()) == [
            Extent(0, MiB, True, hole=True),
            Extent(MiB, MiB, False),
            Extent(2 * MiB, 3 * MiB, True, hole=True),
            Extent(5 * MiB, 4096, False),
            Extent(5 * MiB + 4096, 3 * MiB - 4096, True, hole=True),
        ]
        assert list(vol.extents(offset=MiB + 10, length=MiB)) == [
            Extent(MiB + 10, MiB - 10, False),
            Extent(2 * MiB, 10, True, hole=True),
        ]
        assert list(vol.extents("dirty")) == [Extent(0, 8 * MiB, False, dirty=True)]


def test_zero_punches_a_hole(tmp_path):
    path = tmp_path / "disk"
    sparse_file(path, 4 * MiB, [(0, b"x" * 4 * MiB)])
    with FileVolume(path, writable=True) as vol:
        vol.zero(MiB, 2 * MiB)
        assert vol.allocated_bytes() <= 2 * MiB + 64 * 1024
        assert vol.read(MiB - 1, 2 * MiB + 2) == b"x" + bytes(2 * MiB) + b"x"
        assert vol.size == 4 * MiB


def test_reads_and_writes_at_offsets_from_many_threads(tmp_path):
    with FileVolume.create(tmp_path / "disk", 16 * 65536) as vol:

        def work(i: int) -> None:
            vol.write(i * 65536, bytes([i]) * 65536)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        vol.flush()
        for i in range(16):
            assert vol.read(i * 65536, 65536) == bytes([i]) * 65536


def test_short_read_and_read_only_writes_fail(tmp_path):
    (tmp_path / "small").write_bytes(b"abc")
    with FileVolume(tmp_path / "small") as vol:
        with pytest.raises(VolumeError, match="short read at offset 3"):
            vol.read(0, 4)
        with pytest.raises(VolumeError, match="read-only"):
            vol.write(0, b"x")
        with pytest.raises(VolumeError, match="read-only"):
            vol.zero(0, 1)


def test_what_cannot_be_a_volume(tmp_path):
    with pytest.raises(VolumeError, match="neither a regular file nor a block device"):
        FileVolume(tmp_path)
    with pytest.raises(VolumeError, match="No such file or directory"):
        FileVolume(tmp_path / "missing")
    assert not is_block_device(tmp_path / "missing")


def test_block_device(loop_device):
    device = loop_device(4 * MiB)
    assert is_block_device(device)
    with FileVolume(device, writable=True) as vol:
        assert vol.size == 4 * MiB
        assert not vol.sparse
        assert list(vol.extents()) == [Extent(0, 4 * MiB, False)]
        vol.write(0, b"\x55" * (4 * MiB))
        vol.zero(4096, MiB)
        vol.flush()
        assert vol.read(0, 4096 + MiB + 1) == b"\x55" * 4096 + bytes(MiB) + b"\x55"
        with pytest.raises(VolumeError, match="cannot be resized"):
            vol.truncate(MiB)
    with open(device, "rb") as f:
        assert f.read(4097)[-1] == 0
    assert os.path.exists(device)


@pytest.fixture
def direct_dir(tmp_path):
    """A folder on a file system that takes O_DIRECT."""
    probe = tmp_path / "probe"
    probe.touch()
    try:
        os.close(os.open(probe, os.O_RDWR | os.O_DIRECT))
    except OSError:
        pytest.skip("the file system of the temporary folder refuses O_DIRECT")
    return tmp_path


def test_takes_direct_io_says_whether_a_file_opens_for_writing_with_o_direct(direct_dir):
    disk = direct_dir / "disk"
    disk.touch()
    assert takes_direct_io(disk)
    assert not takes_direct_io(direct_dir / "missing")
    assert not takes_direct_io(direct_dir)  # a folder
    read_only = direct_dir / "read-only"
    read_only.touch(mode=0o444)
    assert takes_direct_io(read_only) == (os.geteuid() == 0)


@pytest.mark.parametrize("direct", [False, True])
def test_direct_writes_of_aligned_pages_go_around_the_page_cache(direct_dir, direct):
    data = mmap.mmap(-1, MiB)
    data.write(random.Random(1).randbytes(MiB))
    path = direct_dir / "disk"
    with FileVolume.create(path, 4 * MiB, direct=direct) as vol:
        vol.write(MiB, memoryview(data))
    assert cached_pages(path) == (0 if direct else MiB // DIRECT_ALIGN)
    with open(path, "rb") as f:
        f.seek(MiB)
        assert f.read(MiB) == data[:]


def test_direct_volume_writes_what_o_direct_cannot_take_the_buffered_way(direct_dir):
    rng = random.Random(2)
    aligned = mmap.mmap(-1, 2 * DIRECT_ALIGN)
    aligned.write(rng.randbytes(2 * DIRECT_ALIGN))
    writes = [
        (5, rng.randbytes(3000)),  # unaligned offset
        (DIRECT_ALIGN, rng.randbytes(DIRECT_ALIGN)),  # read-only memory
        (3 * DIRECT_ALIGN, memoryview(aligned)[1 : DIRECT_ALIGN + 1]),  # unaligned memory
        (5 * DIRECT_ALIGN, memoryview(aligned)[:100]),  # part of a page
        (7 * DIRECT_ALIGN, memoryview(aligned)),  # whole aligned pages
    ]
    expected = bytearray(16 * DIRECT_ALIGN)
    path = direct_dir / "disk"
    with FileVolume.create(path, len(expected), direct=True) as vol:
        for offset, data in writes:
            vol.write(offset, data)
            expected[offset : offset + len(data)] = data
    assert path.read_bytes() == expected


def test_after_o_direct_is_refused_every_write_goes_the_buffered_way(direct_dir, monkeypatch):
    data = mmap.mmap(-1, MiB)
    data.write(random.Random(4).randbytes(MiB))
    real, refused = os.pwrite, []

    def pwrite(fd, buf, offset):
        if not refused:
            refused.append(fd)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, buf, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    path = direct_dir / "disk"
    with FileVolume.create(path, 4 * MiB, direct=True) as vol:
        vol.write(0, memoryview(data))
        vol.write(2 * MiB, memoryview(data))
    assert refused
    assert cached_pages(path) == 2 * MiB // DIRECT_ALIGN
    assert path.read_bytes() == data[:] + bytes(MiB) + data[:] + bytes(MiB)


def test_o_direct_refused_in_one_thread_leaves_the_write_of_another_whole(direct_dir, monkeypatch):
    data = mmap.mmap(-1, MiB)
    data.write(random.Random(5).randbytes(MiB))
    real, refused = os.pwrite, threading.Event()

    def pwrite(fd, buf, offset):
        if offset == 0:  # the other thread's write, on its way when the refusal comes
            refused.wait(10)
        elif not refused.is_set():
            refused.set()
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real(fd, buf, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    path = direct_dir / "disk"
    errors: list[BaseException] = []
    with FileVolume.create(path, 4 * MiB, direct=True) as vol:

        def first() -> None:
            try:
                vol.write(0, memoryview(data))
            except VolumeError as e:
                errors.append(e)

        other = threading.Thread(target=first)
        other.start()
        vol.write(2 * MiB, memoryview(data))
        other.join(10)
    assert errors == []
    assert path.read_bytes() == data[:] + bytes(MiB) + data[:] + bytes(MiB)


def test_a_copy_onto_a_direct_target_writes_around_the_page_cache(direct_dir):
    src_path, dst_path = direct_dir / "src", direct_dir / "dst"
    body = random.Random(3).randbytes(3 * MiB)
    sparse_file(src_path, 8 * MiB, [(MiB, body)])
    with FileVolume(src_path) as src, FileVolume.create(dst_path, 8 * MiB, direct=True) as dst:
        copy(src, dst, dst_zeroed=True, block_size=MiB)
    assert cached_pages(dst_path) == 0
    assert dst_path.read_bytes() == src_path.read_bytes()
