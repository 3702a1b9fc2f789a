"""SparseWriter: any chunking of a stream gives the same file, zero blocks left as holes."""

from __future__ import annotations

import itertools
import os
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskferry.base.errors import CancelledError
from diskferry.disk.errors import VolumeError
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.sparse_writer import ImageTooLargeError, SparseWriter

PAGE = 4096
SETTINGS = settings(max_examples=40)


def stream_of(layout: list[tuple[bool, int]], seed: int) -> bytes:
    rnd = random.Random(seed)
    return b"".join(rnd.randbytes(n) if data else bytes(n) for data, n in layout)


@SETTINGS
@given(
    layout=st.lists(st.tuples(st.booleans(), st.integers(1, 100_000)), min_size=1, max_size=12),
    seed=st.integers(0, 100),
    cuts=st.lists(st.integers(0, 1_200_000), max_size=20),
    block=st.sampled_from([PAGE, 64 * 1024, 1 << 20]),
    dst_zeroed=st.booleans(),
)
def test_any_chunking_gives_the_same_file(tmp_path, layout, seed, cuts, block, dst_zeroed):
    data = stream_of(layout, seed)
    path = tmp_path / "out"
    if dst_zeroed:
        volume = FileVolume.create(path, 0)
    else:
        path.write_bytes(b"\xee" * (len(data) + 3 * PAGE))
        volume = FileVolume(path, writable=True)
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    with volume:
        writer = SparseWriter(volume, block_size=block, dst_zeroed=dst_zeroed)
        for start, end in itertools.pairwise(bounds):
            writer.write(data[start:end])
        assert writer.close() == len(data)
        if dst_zeroed:
            volume.truncate(len(data))
    assert path.read_bytes()[: len(data)] == data
    assert writer.bytes_written + writer.bytes_zero == len(data)
    if dst_zeroed:
        assert os.stat(path).st_blocks * 512 <= writer.bytes_written + PAGE


def test_long_zero_runs_stay_holes(tmp_path):
    data = os.urandom(PAGE) + bytes(8 << 20) + os.urandom(PAGE)
    with FileVolume.create(tmp_path / "out", 0) as volume:
        writer = SparseWriter(volume)
        writer.write(data)
        writer.close()
        volume.truncate(len(data))
        assert volume.allocated_bytes() <= 2 * 64 * 1024
    assert (tmp_path / "out").read_bytes() == data


def test_writing_past_the_limit_is_refused(tmp_path):
    with FileVolume.create(tmp_path / "out", 0) as volume:
        writer = SparseWriter(volume, limit=1000, limit_message="too big")
        writer.write(bytes(600))
        with pytest.raises(ImageTooLargeError, match=r"^too big$"):
            writer.write(bytes(401))
        writer.abort()


def test_cancel_stops_the_writer(tmp_path):
    cancel = threading.Event()
    with FileVolume.create(tmp_path / "out", 0) as volume:
        writer = SparseWriter(volume, cancel=cancel)
        writer.write(b"x" * 10)
        cancel.set()
        with pytest.raises(CancelledError):
            writer.write(b"y")
        writer.abort()


def test_a_write_error_reaches_the_producer(tmp_path):
    (tmp_path / "ro").write_bytes(b"")
    with FileVolume(tmp_path / "ro") as readonly:
        writer = SparseWriter(readonly, block_size=PAGE)
        with pytest.raises(VolumeError, match="read-only"):
            for _ in range(64):
                writer.write(b"\x01" * PAGE)
            writer.close()
