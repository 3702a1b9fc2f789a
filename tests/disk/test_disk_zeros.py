"""Zero detection and the data runs inside a block."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from diskferry.disk.zeros import PAGE, PIECE, data_runs, is_zero

blocks = st.lists(st.tuples(st.booleans(), st.integers(1, 3 * PIECE)), min_size=0, max_size=10).map(
    lambda layout: b"".join(b"\x07" * n if data else bytes(n) for data, n in layout)
)


@given(blocks)
def test_data_runs_cover_every_nonzero_byte_and_only_zeros_lie_outside(block):
    runs = data_runs(block)
    outside = bytearray(block)
    last = 0
    for start, end in runs:
        assert last <= start < end <= len(block)
        outside[start:end] = bytes(end - start)
        last = end
    assert is_zero(outside)
    assert is_zero(block) == (runs == [])


@given(blocks)
def test_data_runs_are_separated_by_whole_zero_pieces(block):
    runs = data_runs(block)
    for (_, end), (start, _) in itertools.pairwise(runs):
        assert is_zero(block[end:start])
        assert start - end >= PAGE


def test_zero_edges_are_trimmed_to_pages():
    block = bytes(PAGE * 3) + b"\x01" + bytes(PIECE - PAGE * 3 - 1)
    assert data_runs(block) == [(3 * PAGE, 4 * PAGE)]


def test_is_zero_on_large_and_odd_sizes():
    assert is_zero(bytes(3 << 20 | 5))
    assert not is_zero(bytes(3 << 20) + b"\x01")
    assert is_zero(b"")
