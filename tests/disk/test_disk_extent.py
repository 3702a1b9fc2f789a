"""Extents: merging neighbours, clipping to a range, the JSON shape."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from diskferry.disk.extent import Extent, clip, merge_adjacent

layouts = st.lists(
    st.tuples(
        st.integers(0, 50), st.booleans(), st.booleans(), st.sampled_from([None, True, False])
    ),
    max_size=30,
)


def contiguous(layout) -> list[Extent]:
    out, pos = [], 0
    for length, zero, hole, dirty in layout:
        out.append(Extent(pos, length, zero, hole, dirty))
        pos += length
    return out


def byte_map(extents) -> list[tuple[bool, bool, bool | None]]:
    return [(e.zero, e.hole, e.dirty) for e in extents for _ in range(e.length)]


@given(layouts)
def test_merge_keeps_every_byte_and_leaves_no_equal_neighbours(layout):
    extents = contiguous(layout)
    merged = list(merge_adjacent(extents))
    assert byte_map(merged) == byte_map(extents)
    assert all(e.length > 0 for e in merged)
    for a, b in itertools.pairwise(merged):
        assert a.end == b.start
        assert (a.zero, a.hole, a.dirty) != (b.zero, b.hole, b.dirty)


def test_merge_does_not_join_across_a_gap():
    gap = [Extent(0, 10, False), Extent(20, 10, False)]
    assert list(merge_adjacent(gap)) == gap


@given(layouts, st.integers(0, 200), st.integers(0, 200))
def test_clip_keeps_exactly_the_bytes_in_range(layout, offset, length):
    extents = contiguous(layout)
    clipped = list(clip(extents, offset, length))
    total = sum(e.length for e in extents)
    want = byte_map(extents)[offset : min(total, offset + length)]
    assert byte_map(clipped) == want
    assert all(offset <= e.start and e.end <= offset + length for e in clipped)
    if clipped:
        assert clipped[0].start == offset


def test_json_shape():
    assert Extent(0, 5, False).to_json() == {"offset": 0, "length": 5, "type": "data"}
    assert Extent(5, 5, True).to_json() == {"offset": 5, "length": 5, "type": "zero"}
    assert Extent(9, 1, False, dirty=True).to_json() == {"offset": 9, "length": 1, "type": "dirty"}
    assert Extent(9, 1, False, dirty=True).end == 10


def test_a_hole_that_is_not_zero_is_data():
    hole = Extent(0, 5, zero=False, hole=True)
    assert hole.to_json() == {"offset": 0, "length": 5, "type": "data"}
    assert Extent(0, 5, zero=True, hole=True).to_json()["type"] == "zero"
    data = Extent(5, 5, zero=False)
    assert list(merge_adjacent([hole, data])) == [hole, data]
    assert list(clip([hole], 1, 2)) == [Extent(1, 2, zero=False, hole=True)]
