"""What reads as zeros at a backup point: raw-volume holes the fleecing file holds no copy of.

QEMU passes the holes of a CBT disk's raw volume up through its qcow2 overlay only when
it takes the overlay's metadata for preallocated, a guess from how much of the overlay
file is allocated; on volumes of some 20 GiB and more it guesses not, and the whole disk
reads as data. The fleecing export answers instead: every write after the point, a
discard too, first copies the bytes it replaces into the fleecing file, so a run the
fleecing file does not hold is as the raw volume has it now. The raw volume is asked
before the fleecing file, so a run written in between is found copied and read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from diskferry.disk.extent import Extent
from diskferry.disk.volume import Volume

Runs = Callable[[int, int], Iterable[tuple[int, int]]]

# how much of the disk is mapped at a time: the raw map and the fleecing file's runs of
# one window are held in memory together
WINDOW = 1 << 30


def point_zeros(raw: Volume, copied: Runs, offset: int, end: int) -> Iterator[Extent]:
    """Extents of [offset, end): zero where `raw` has a hole and `copied` holds nothing.

    `copied(offset, length)` gives the runs the fleecing file holds, in order.
    """
    for pos in range(offset, end, WINDOW):
        stop = min(pos + WINDOW, end)
        holes = [(e.start, e.end) for e in raw.extents("zero", pos, stop - pos) if e.zero]
        kept = [(start, start + length) for start, length in copied(pos, stop - pos)]
        yield from _covering(pos, stop, _without(holes, kept))


def _without(runs: list[tuple[int, int]], cut: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """The parts of the ordered `runs` that no run of the ordered `cut` covers."""
    i = 0
    for start, stop in runs:
        while i < len(cut) and cut[i][1] <= start:
            i += 1
        j = i
        while start < stop:
            if j == len(cut) or cut[j][0] >= stop:
                yield start, stop
                break
            if cut[j][0] > start:
                yield start, cut[j][0]
            start = max(start, cut[j][1])
            j += 1


def _covering(start: int, stop: int, zeros: Iterable[tuple[int, int]]) -> Iterator[Extent]:
    """Extents from `start` to `stop`: the ordered `zeros` and data between them."""
    pos = start
    for zero_start, zero_stop in zeros:
        if zero_start > pos:
            yield Extent(pos, zero_start - pos, zero=False)
        yield Extent(zero_start, zero_stop - zero_start, zero=True, hole=True)
        pos = zero_stop
    if pos < stop:
        yield Extent(pos, stop - pos, zero=False)
