"""The copy engine over random sparse layouts: exact bytes, holes never read."""

from __future__ import annotations

import os
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskferry.base.errors import CancelledError
from diskferry.disk.copy import copy
from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.progress import Progress
from diskferry.disk.volume import RunReader

PAGE = 4096
runs = st.lists(
    st.tuples(st.sampled_from(["data", "hole", "zeros"]), st.integers(1, 40)),
    min_size=1,
    max_size=24,
)
SETTINGS = settings(max_examples=40)


class RecordingVolume(FileVolume):
    """A FileVolume that remembers every range read from it, and every run opened."""

    def __init__(self, path: str, run_size: int | None = None) -> None:
        super().__init__(path)
        self.run_size = run_size
        self.reads: list[tuple[int, int]] = []
        self.runs: list[tuple[int, int]] = []
        self.batches: list[list[tuple[int, int]]] = []
        self._lock = threading.Lock()

    def read_into_many(self, pieces) -> None:
        with self._lock:
            self.batches.append([(offset, offset + len(buf)) for offset, buf in pieces])
        super().read_into_many(pieces)

    def open_run(self, offset: int, length: int) -> RunReader:
        with self._lock:
            self.runs.append((offset, offset + length))
        return super().open_run(offset, length)

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        with self._lock:
            self.reads.append((offset, offset + len(buf)))
        super().read_into(offset, buf)


def make_layout(path: str, layout: list[tuple[str, int]], seed: int) -> tuple[bytes, list]:
    """Write `layout` (kind, pages) as a sparse file; its bytes and its hole ranges."""
    rnd = random.Random(seed)
    content = bytearray()
    holes = []
    with open(path, "wb") as f:
        for kind, pages in layout:
            length = pages * PAGE
            start = len(content)
            if kind == "data":
                block = rnd.randbytes(length)
                f.seek(start)
                f.write(block)
                content += block
            elif kind == "zeros":
                f.seek(start)
                f.write(bytes(length))
                content += bytes(length)
            else:
                holes.append((start, start + length))
                content += bytes(length)
        f.truncate(len(content))
    return bytes(content), holes


def _allocated(content: bytes, holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The stretches of a layout between its holes."""
    stretches, pos = [], 0
    for start, end in [*holes, (len(content), len(content))]:
        if start > pos:
            stretches.append((pos, start))
        pos = end
    return stretches


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


@SETTINGS
@given(
    layout=runs,
    seed=st.integers(0, 1000),
    block=st.sampled_from([PAGE, 16 * PAGE, 1 << 20]),
    workers=st.integers(1, 4),
    dst_zeroed=st.booleans(),
    run_size=st.sampled_from([None, 8 * PAGE, 64 * PAGE]),
)
def test_copy_is_exact_and_never_reads_a_hole(
    tmp_path, layout, seed, block, workers, dst_zeroed, run_size
):
    src_path, dst_path = str(tmp_path / "src"), str(tmp_path / "dst")
    content, holes = make_layout(src_path, layout, seed)
    if dst_zeroed:
        dst = FileVolume.create(dst_path, len(content))
    else:
        with open(dst_path, "wb") as f:
            f.write(b"\xff" * len(content))
        dst = FileVolume(dst_path, writable=True)
    progress = Progress(len(content))
    with RecordingVolume(src_path, run_size) as src, dst:
        result = copy(
            src,
            dst,
            progress=progress,
            dst_zeroed=dst_zeroed,
            block_size=block,
            workers=workers,
            max_memory=2 * block,
        )
    with open(dst_path, "rb") as f:
        assert f.read() == content
    assert not [r for r in src.reads for h in holes if overlaps(r, h)]
    assert all(end - start <= block for start, end in src.reads)
    assert not [r for r in src.runs for h in holes if overlaps(r, h)]
    if run_size is not None:  # one run for each allocated stretch, or each run_size of it
        longest = max(block, run_size)
        assert len(src.runs) == sum(
            -(-(end - start) // longest) for start, end in _allocated(content, holes)
        )
    hole_bytes = sum(end - start for start, end in holes)
    assert result.bytes_read == len(content) - hole_bytes
    assert result.bytes_written + result.bytes_zero == len(content)
    data_bytes = sum(pages * PAGE for kind, pages in layout if kind == "data")
    zero_bytes = sum(pages * PAGE for kind, pages in layout if kind == "zeros")
    # zero pages inside a 64 KiB piece that has data are written with it
    assert data_bytes <= result.bytes_written <= data_bytes + zero_bytes
    assert progress.done == len(content)
    if dst_zeroed:
        assert os.stat(dst_path).st_blocks * 512 <= result.bytes_written


def test_copy_of_chosen_extents_only(tmp_path):
    src_path = str(tmp_path / "src")
    content, _ = make_layout(src_path, [("data", 64)], 1)
    with RecordingVolume(src_path) as src, FileVolume.create(tmp_path / "dst", len(content)) as dst:
        copy(src, dst, extents=[Extent(8 * PAGE, 4 * PAGE, zero=False)])
    data = (tmp_path / "dst").read_bytes()
    assert data[8 * PAGE : 12 * PAGE] == content[8 * PAGE : 12 * PAGE]
    assert data[: 8 * PAGE] == bytes(8 * PAGE)
    assert src.reads == [(8 * PAGE, 12 * PAGE)]


def test_small_extents_are_read_together_as_many_as_a_buffer_holds(tmp_path):
    src_path = str(tmp_path / "src")
    content, holes = make_layout(src_path, [("data", 2), ("hole", 3)] * 12, 4)
    block = 16 * PAGE
    with RecordingVolume(src_path) as src, FileVolume.create(tmp_path / "dst", len(content)) as dst:
        result = copy(src, dst, dst_zeroed=True, block_size=block, workers=2)
    assert (tmp_path / "dst").read_bytes() == content
    assert result.bytes_read == len(content) - sum(end - start for start, end in holes)
    # 12 runs of 2 pages (one cut at a block's edge), 16 pages to a buffer: 2 reads, not 13
    assert len(src.batches) == 2
    assert all(sum(end - start for start, end in batch) <= block for batch in src.batches)
    read = sorted(r for batch in src.batches for r in batch)
    joined = [list(read[0])]
    for start, end in read[1:]:
        if start == joined[-1][1]:
            joined[-1][1] = end
        else:
            joined.append([start, end])
    assert [tuple(r) for r in joined] == _allocated(content, holes)


def test_cancelled_copy_stops(tmp_path):
    src_path = str(tmp_path / "src")
    make_layout(src_path, [("data", 256)], 2)
    cancel = threading.Event()
    cancel.set()
    dst = FileVolume.create(tmp_path / "dst", 256 * PAGE)
    with FileVolume(src_path) as src, dst, pytest.raises(CancelledError):
        copy(src, dst, cancel=cancel, block_size=PAGE)


class FailingVolume(FileVolume):
    """Writes fail after the first few."""

    def __init__(self, path, limit: int) -> None:
        super().__init__(path, writable=True)
        self.limit = limit

    def write(self, offset: int, data) -> None:
        if offset >= self.limit:
            raise VolumeError(f"no room at {offset}")
        super().write(offset, data)


def test_write_failure_ends_the_copy_with_its_error(tmp_path):
    src_path = str(tmp_path / "src")
    make_layout(src_path, [("data", 512)], 3)
    FileVolume.create(tmp_path / "dst", 512 * PAGE).close()
    dst = FailingVolume(tmp_path / "dst", 64 * PAGE)
    with FileVolume(src_path) as src, dst, pytest.raises(VolumeError, match="no room at"):
        copy(src, dst, block_size=PAGE, workers=4, max_memory=4 * PAGE)
