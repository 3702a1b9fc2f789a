"""point_zeros: a point's zeros from the raw volume's holes and the fleecing file's copies."""

from __future__ import annotations

import itertools

import pytest

from diskferry.disk.extent import Extent, merge_adjacent
from diskferry.disk.volume import Volume
from diskferry.nbd import point_zeros as pz


class _Raw(Volume):
    """A volume of `size` bytes whose holes are `holes`."""

    def __init__(self, size: int, holes: list[tuple[int, int]]) -> None:
        self._size = size
        self.holes = holes
        self.asked: list[tuple[int, int]] = []

    @property
    def size(self) -> int:
        return self._size

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        raise AssertionError("the map reads nothing")

    def extents(self, context="zero", offset=0, length=None):
        end = self.size if length is None else offset + length
        self.asked.append((offset, end))
        pos = offset
        for start, stop in self.holes:
            start, stop = max(start, offset), min(stop, end)
            if start >= stop:
                continue
            if start > pos:
                yield Extent(pos, start - pos, zero=False)
            yield Extent(start, stop - start, zero=True, hole=True)
            pos = stop
        if pos < end:
            yield Extent(pos, end - pos, zero=False)


def _copied(runs: list[tuple[int, int]]):
    def copied(offset: int, length: int):
        for start, n in runs:
            start, stop = max(start, offset), min(start + n, offset + length)
            if start < stop:
                yield start, stop - start

    return copied


def _zeros(raw: Volume, copied, end: int) -> list[tuple[int, int, bool]]:
    extents = merge_adjacent(pz.point_zeros(raw, copied, 0, end))
    return [(e.start, e.length, e.zero) for e in extents]


def test_a_hole_is_zero_unless_the_fleecing_file_holds_a_copy_of_it() -> None:
    raw = _Raw(100, [(0, 40), (60, 100)])
    got = _zeros(raw, _copied([(10, 5), (35, 30), (90, 10)]), 100)
    assert got == [
        (0, 10, True),
        (10, 5, False),
        (15, 20, True),
        (35, 30, False),  # a copy that spans data and both holes' edges
        (65, 25, True),
        (90, 10, False),
    ]


def test_without_copies_the_map_is_the_raw_volume_s() -> None:
    raw = _Raw(100, [(20, 30), (70, 80)])
    assert _zeros(raw, _copied([]), 100) == [
        (0, 20, False),
        (20, 10, True),
        (30, 40, False),
        (70, 10, True),
        (80, 20, False),
    ]


def test_a_copy_covering_several_holes_makes_them_all_data() -> None:
    raw = _Raw(100, [(10, 20), (30, 40), (50, 60)])
    assert _zeros(raw, _copied([(5, 60)]), 100) == [(0, 100, False)]


def test_the_map_is_taken_window_by_window_raw_volume_first(monkeypatch) -> None:
    monkeypatch.setattr(pz, "WINDOW", 32)
    raw = _Raw(100, [(0, 100)])
    order = []

    def copied(offset: int, length: int):
        order.append(("copied", offset))
        assert raw.asked[-1] == (offset, offset + length)  # the raw volume was asked first
        return [(offset, 2)]

    got = _zeros(raw, copied, 100)
    assert raw.asked == [(0, 32), (32, 64), (64, 96), (96, 100)]
    assert [o for _, o in order] == [0, 32, 64, 96]
    assert got == [
        (0, 2, False),
        (2, 30, True),
        (32, 2, False),
        (34, 30, True),
        (64, 2, False),
        (66, 30, True),
        (96, 2, False),
        (98, 2, True),
    ]


@pytest.mark.parametrize("offset", [0, 7, 50])
def test_the_extents_cover_the_range_asked_exactly(offset: int) -> None:
    raw = _Raw(100, [(5, 45), (55, 95)])
    extents = list(pz.point_zeros(raw, _copied([(40, 20)]), offset, 100))
    assert extents[0].start == offset and extents[-1].end == 100
    assert all(a.end == b.start for a, b in itertools.pairwise(extents))
