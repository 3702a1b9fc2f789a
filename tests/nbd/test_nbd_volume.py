"""NbdVolume and open_volume: the Volume contract over NBD, extents equal to nbdinfo --map."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nbd_helpers import (
    Server,
    as_extents,
    make_image,
    nbdinfo_map,
    pattern,
    qcow2_with_bitmap,
    unix_url,
)

from diskferry.disk.copy import copy
from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent, clip, merge_adjacent
from diskferry.disk.file_volume import FileVolume
from diskferry.nbd import open_volume
from diskferry.nbd.errors import NbdError, NbdUrlError
from diskferry.nbd.volume import NbdVolume

MiB = 1 << 20


@pytest.fixture
def sparse_image(tmp_path: Path) -> Path:
    """A sparse 64 MiB raw image with data runs of different sizes."""
    pieces = {MiB: pattern(64 * 1024, 1), 5 * MiB: pattern(3 * MiB, 2), 63 * MiB: pattern(MiB, 3)}
    return make_image(tmp_path / "sparse.raw", 64 * MiB, pieces)


def test_zero_extents_equal_nbdinfo_on_qemu_nbd(
    qemu_nbd: Callable[..., Server], sparse_image: Path
) -> None:
    server = qemu_nbd(sparse_image)
    with NbdVolume.open(server.url) as volume:
        extents = list(volume.extents("zero"))
        part = list(volume.extents("zero", 5 * MiB + 100, 10 * MiB))
    assert extents == as_extents(nbdinfo_map(server.url), dirty=False)
    assert [e.zero for e in extents] == [True, False, True, False, True, False]
    assert part == list(merge_adjacent(clip(extents, 5 * MiB + 100, 10 * MiB)))


def test_a_hole_that_is_not_zero_is_read(nbdkit: Callable[..., Server], tmp_path: Path) -> None:
    image = make_image(
        tmp_path / "backed.raw", 8 * MiB, {0: pattern(2 * MiB, 5), 4 * MiB: pattern(MiB, 6)}
    )
    listing = tmp_path / "extents.txt"
    # 0-2 MiB unallocated yet not zeros (as over a backing file); the gaps are zero holes
    listing.write_text("0 2M hole\n4M 1M\n")
    server = nbdkit("-r", "file", str(image), f"extentlist={listing}", filters=("extentlist",))
    with NbdVolume.open(server.url) as volume:
        extents = list(volume.extents("zero"))
        with FileVolume.create(tmp_path / "copy.raw", volume.size) as target:
            result = copy(volume, target, dst_zeroed=True)
    assert result.bytes_read == 3 * MiB
    assert (tmp_path / "copy.raw").read_bytes() == image.read_bytes()
    assert extents == [
        Extent(0, 2 * MiB, zero=False, hole=True),
        Extent(2 * MiB, 2 * MiB, zero=True, hole=True),
        Extent(4 * MiB, MiB, zero=False),
        Extent(5 * MiB, 3 * MiB, zero=True, hole=True),
    ]
    assert extents == as_extents(nbdinfo_map(server.url), dirty=False)


def test_zero_extents_in_many_pieces_on_nbdkit(nbdkit: Callable[..., Server]) -> None:
    server = nbdkit("sparse-random", "64M", "seed=11", "runlength=4096", "percent=30")
    with NbdVolume.open(server.url) as volume:
        extents = list(volume.extents("zero"))
        assert volume.readonly
    assert len(extents) > 1000
    assert extents == as_extents(nbdinfo_map(server.url), dirty=False)
    assert extents[0].start == 0 and extents[-1].end == 64 * MiB


def test_dirty_extents_equal_nbdinfo_on_qemu_nbd(
    qemu_nbd: Callable[..., Server], tmp_path: Path
) -> None:
    image = qcow2_with_bitmap(
        tmp_path / "cbt.qcow2",
        "64M",
        "b0",
        "write -P 0xab 1M 64k",
        "write -P 0xcd 9M 200k",
        "write -P 0xef 40M 1M",
    )
    server = qemu_nbd(image, "qcow2", "--bitmap=b0")
    with NbdVolume.open(server.url, bitmap="b0") as volume:
        dirty = list(volume.extents("dirty"))
        zero = list(volume.extents("zero"))
        assert volume.read(MiB, 4) == b"\xab" * 4
    assert dirty == as_extents(nbdinfo_map(server.url, "qemu:dirty-bitmap:b0"), dirty=True)
    assert [(e.start, e.length) for e in dirty if e.dirty] == [
        (MiB, 64 * 1024),
        (9 * MiB, 256 * 1024),
        (40 * MiB, MiB),
    ]
    assert all(not e.zero for e in dirty)
    assert zero == as_extents(nbdinfo_map(server.url), dirty=False)


def test_missing_bitmap_names_the_ones_offered(
    qemu_nbd: Callable[..., Server], tmp_path: Path
) -> None:
    image = qcow2_with_bitmap(tmp_path / "cbt.qcow2", "16M", "b0", "write 0 64k")
    server = qemu_nbd(image, "qcow2", "--bitmap=b0")
    with pytest.raises(NbdError) as caught:
        NbdVolume.open(server.url, bitmap="b1")
    assert "no dirty bitmap 'b1'" in str(caught.value)
    assert "offers: b0" in str(caught.value)


def test_storage_daemon_export_with_bitmap(serve: Callable[..., Server], tmp_path: Path) -> None:
    image = qcow2_with_bitmap(tmp_path / "vm.qcow2", "32M", "cp1", "write -P 0x22 2M 128k")
    sock = tmp_path / "qsd.sock"
    argv = [
        "qemu-storage-daemon",
        "--blockdev",
        f"driver=file,node-name=file0,filename={image}",
        "--blockdev",
        "driver=qcow2,node-name=disk0,file=file0",
        "--nbd-server",
        f"addr.type=unix,addr.path={sock}",
        "--export",
        "type=nbd,id=e0,node-name=disk0,name=vda,writable=on,bitmaps.0=cp1",
    ]
    server = serve(argv, str(sock), unix_url(sock, "vda"))
    data = pattern(300_000, 4)
    with NbdVolume.open(server.url, writable=True, bitmap="cp1") as volume:
        assert not volume.readonly and volume.sparse
        assert volume.size == 32 * MiB
        volume.write(20 * MiB, data)
        volume.flush()
        assert volume.read(20 * MiB, len(data)) == data
        assert volume.read(2 * MiB, 2) == b"\x22\x22"
        dirty = [(e.start, e.end) for e in volume.extents("dirty") if e.dirty]
    assert dirty == [(2 * MiB, 2 * MiB + 128 * 1024), (20 * MiB, 20 * MiB + 320 * 1024)]
    mapped = as_extents(nbdinfo_map(server.url, "qemu:dirty-bitmap:cp1"), dirty=True)
    assert mapped == list(_dirty_from(dirty, 32 * MiB))


def _dirty_from(runs: list[tuple[int, int]], size: int) -> Iterator[Extent]:
    pos = 0
    for start, end in runs:
        yield Extent(pos, start - pos, zero=False, dirty=False)
        yield Extent(start, end - start, zero=False, dirty=True)
        pos = end
    yield Extent(pos, size - pos, zero=False, dirty=False)


def test_write_zero_flush_through_the_volume(
    qemu_nbd: Callable[..., Server], sparse_image: Path
) -> None:
    server = qemu_nbd(sparse_image)
    with NbdVolume.open(server.url, writable=True) as volume:
        assert volume.sparse and not volume.readonly
        volume.write(30 * MiB, b"hello")
        volume.zero(5 * MiB, MiB)
        volume.zero(5 * MiB, 0)
        volume.flush()
        zero = list(volume.extents("zero", 5 * MiB, MiB))
    assert [e.zero for e in zero] == [True]
    with open(sparse_image, "rb") as f:
        f.seek(30 * MiB)
        assert f.read(5) == b"hello"
        f.seek(5 * MiB)
        assert f.read(MiB) == bytes(MiB)


def test_zero_falls_back_to_writing_zeros(nbdkit: Callable[..., Server]) -> None:
    server = nbdkit("memory", "8M", filters=("nozero",))
    with NbdVolume.open(server.url, writable=True) as volume:
        assert not volume.client.can_zero
        volume.write(0, b"\xff" * (3 * MiB))
        volume.zero(1000, 2 * MiB + 5)
        got = volume.read(0, 3 * MiB)
    assert got == b"\xff" * 1000 + bytes(2 * MiB + 5) + b"\xff" * (MiB - 1005)


def test_read_only_volume(qemu_nbd: Callable[..., Server], sparse_image: Path) -> None:
    server = qemu_nbd(sparse_image)
    with NbdVolume.open(server.url) as volume:
        assert volume.readonly
        with pytest.raises(VolumeError):
            volume.write(0, b"x")
        with pytest.raises(VolumeError):
            volume.zero(0, 10)
    read_only = qemu_nbd(sparse_image, "raw", "--read-only", "--export-name=ro")
    with pytest.raises(NbdError) as caught:
        NbdVolume.open(read_only.url.replace(":///", ":///ro"), writable=True)
    assert "read-only" in str(caught.value)


def test_dirty_without_bitmap_is_all_dirty(
    qemu_nbd: Callable[..., Server], sparse_image: Path
) -> None:
    server = qemu_nbd(sparse_image)
    with NbdVolume.open(server.url) as volume:
        assert [(e.start, e.length, e.dirty) for e in volume.extents("dirty")] == [
            (0, 64 * MiB, True)
        ]


def test_open_volume(qemu_nbd: Callable[..., Server], sparse_image: Path) -> None:
    server = qemu_nbd(sparse_image)
    with open_volume(server.url) as volume:
        assert isinstance(volume, NbdVolume)
        assert volume.read(MiB, 64 * 1024) == pattern(64 * 1024, 1)
    with open_volume(str(sparse_image), writable=True) as volume:
        assert isinstance(volume, FileVolume) and not volume.readonly
    with pytest.raises(VolumeError) as caught:
        open_volume(str(sparse_image), bitmap="b0")
    assert "not an NBD export" in str(caught.value)
    with pytest.raises(NbdUrlError):
        open_volume("nbd+unix:///disk")


def test_qemu_img_reads_what_nbdvolume_wrote(
    qemu_nbd: Callable[..., Server], tmp_path: Path
) -> None:
    image = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-f", "qcow2", str(image), "16M"], check=True)
    server = qemu_nbd(image, "qcow2")
    data = pattern(2 * MiB, 12)
    with NbdVolume.open(server.url, writable=True) as volume:
        volume.write(3 * MiB, data)
        volume.flush()
    server.proc.kill()
    server.proc.wait()
    subprocess.run(
        ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(image), str(tmp_path / "o.raw")],
        check=True,
    )
    with open(tmp_path / "o.raw", "rb") as f:
        f.seek(3 * MiB)
        assert f.read(2 * MiB) == data


def test_a_quiescent_point_takes_its_zeros_from_its_raw_volume_and_asks_no_allocation(
    qemu_nbd: Callable[..., Server], sparse_image: Path, tmp_path: Path
) -> None:
    server = qemu_nbd(sparse_image)
    with NbdVolume.open(server.url, data_file=str(sparse_image), quiescent=True) as volume:
        assert volume.client.contexts == []
        zero = list(volume.extents("zero"))
        part = list(volume.extents("zero", 5 * MiB + 100, 10 * MiB))
    with FileVolume(str(sparse_image)) as raw:
        assert zero == list(raw.extents("zero"))
    assert [e.zero for e in zero] == [True, False, True, False, True, False]
    assert part == list(merge_adjacent(clip(zero, 5 * MiB + 100, 10 * MiB)))
    other = tmp_path / "other.raw"
    other.write_bytes(bytes(MiB))
    with NbdVolume.open(server.url, data_file=str(other), quiescent=True) as volume:
        assert (volume.data_file, volume.quiescent) == (None, False)
        assert volume.client.contexts == ["base:allocation"]
        assert list(volume.extents("zero")) == zero
        assert volume.read(MiB, 64 * 1024) == pattern(64 * 1024, 1)


def test_a_quiescent_point_that_cannot_reconnect_closes_its_raw_volume_once(
    qemu_nbd: Callable[..., Server], sparse_image: Path, tmp_path: Path, monkeypatch
) -> None:
    from diskferry.nbd.client import NbdClient
    from diskferry.nbd.errors import NbdConnectionError

    server = qemu_nbd(sparse_image)
    other = tmp_path / "other.raw"
    other.write_bytes(bytes(MiB))  # not the export's size: the volume connects again
    connect, close = NbdClient.connect.__func__, FileVolume.close
    asked: list[list[str]] = []
    closed: list[str] = []

    def second_refused(cls, url, *args, contexts=(), **kwargs):
        asked.append(list(contexts))
        if len(asked) == 2:
            raise NbdConnectionError("refused")
        return connect(cls, url, *args, contexts=contexts, **kwargs)

    def counted(self) -> None:
        closed.append(self.path)
        close(self)

    monkeypatch.setattr(NbdClient, "connect", classmethod(second_refused))
    monkeypatch.setattr(FileVolume, "close", counted)
    with pytest.raises(NbdConnectionError):
        NbdVolume.open(server.url, data_file=str(other), quiescent=True)
    assert asked == [[], ["base:allocation"]]
    assert closed == [str(other)]
