"""The shared block walk: extents cut into aligned blocks, zero ranges zeroed in bounded steps."""

from __future__ import annotations

import itertools
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diskferry.base.errors import CancelledError
from diskferry.disk.blocks import ZERO_STEP, split, write_block, zero_range
from diskferry.disk.copy import copy
from diskferry.disk.extent import Extent
from diskferry.disk.file_volume import FileVolume

MiB = 1 << 20
GiB = 1 << 30


class ZeroRecording(FileVolume):
    """A writable FileVolume that records each zero call and sets `cancel` on the first."""

    def __init__(self, path, cancel: threading.Event) -> None:
        super().__init__(path, writable=True)
        self.cancel = cancel
        self.zeros: list[int] = []
        self._lock = threading.Lock()

    def zero(self, offset: int, length: int) -> None:
        with self._lock:
            self.zeros.append(length)
        self.cancel.set()
        super().zero(offset, length)


@given(
    runs=st.lists(st.tuples(st.integers(1, 5 * MiB), st.booleans()), min_size=1, max_size=20),
    block=st.sampled_from([4096, MiB, 3 * MiB]),
    zero_size=st.sampled_from([None, MiB]),
    aligned=st.booleans(),
)
def test_split_covers_the_extents_in_bounded_blocks(runs, block, zero_size, aligned) -> None:
    extents, pos = [], 0
    for length, zero in runs:
        extents.append(Extent(pos, length, zero=zero))
        pos += length
    blocks = list(split(extents, block, zero_size, aligned=aligned))
    assert next((b.start, b.zero) for b in blocks) == (0, extents[0].zero)
    assert all(a.end == b.start for a, b in itertools.pairwise(blocks))
    assert blocks[-1].end == pos
    for b in blocks:
        size = (zero_size or max(block, ZERO_STEP)) if b.zero else block
        assert b.length <= size
        source = next(e for e in extents if e.start <= b.start < e.end)
        assert b.end <= source.end and b.zero == source.zero
        if aligned:
            assert b.start // size == (b.end - 1) // size
        else:
            # only an extent's last piece is short
            assert b.length == size or b.end == source.end


def test_a_cancelled_zero_range_stops_after_one_bounded_step(tmp_path) -> None:
    cancel = threading.Event()
    FileVolume.create(tmp_path / "dst", GiB).close()
    with ZeroRecording(tmp_path / "dst", cancel) as dst, pytest.raises(CancelledError):
        zero_range(dst, 0, GiB, cancel)
    assert dst.zeros == [ZERO_STEP]


def test_a_copy_onto_a_used_target_zeroes_in_bounded_steps_and_stops_on_cancel(
    tmp_path,
) -> None:
    FileVolume.create(tmp_path / "src", GiB).close()
    FileVolume.create(tmp_path / "dst", GiB).close()
    cancel = threading.Event()
    with (
        FileVolume(tmp_path / "src") as src,
        ZeroRecording(tmp_path / "dst", cancel) as dst,
        pytest.raises(CancelledError),
    ):
        copy(src, dst, dst_zeroed=False, workers=2, max_memory=2 * MiB, cancel=cancel)
    # the thread that saw the cancel, and at most one other already past its check
    assert 1 <= len(dst.zeros) <= 2
    assert max(dst.zeros) <= ZERO_STEP


def test_write_block_writes_data_runs_and_zeroes_the_rest_of_a_used_target(tmp_path) -> None:
    path = tmp_path / "dst"
    path.write_bytes(b"\xff" * (4 * MiB))
    data = bytearray(4 * MiB)
    data[MiB : MiB + 5] = b"hello"
    with FileVolume(path, writable=True) as dst:
        written = write_block(dst, 0, data, dst_zeroed=False)
    assert path.read_bytes() == bytes(data)
    assert 5 <= written <= 64 * 1024
