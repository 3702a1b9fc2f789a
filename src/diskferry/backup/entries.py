"""Manifest entries: runs of a disk naming part of a chunk or reading as zeros; their algebra.

Every operation takes and gives iterators, reading its input once and in order, so a
manifest of any length flows through it in constant memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple


class Entry(NamedTuple):
    """`length` bytes of the disk at `offset`: from `chunk` at `chunk_offset`, or zeros if None."""

    offset: int
    length: int
    chunk: bytes | None
    chunk_offset: int = 0

    @property
    def end(self) -> int:
        """The disk offset just past the entry."""
        return self.offset + self.length

    def part(self, start: int, stop: int) -> Entry:
        """The piece of the entry over [start, stop) of the disk."""
        if self.chunk is None:
            return Entry(start, stop - start, None, 0)
        return Entry(start, stop - start, self.chunk, self.chunk_offset + start - self.offset)


def _continues(prev: Entry, nxt: Entry) -> bool:
    if prev.end != nxt.offset or prev.chunk != nxt.chunk:
        return False
    return prev.chunk is None or prev.chunk_offset + prev.length == nxt.chunk_offset


def coalesce(entries: Iterable[Entry]) -> Iterator[Entry]:
    """Join neighbours that continue one another (zeros after zeros, the same chunk onwards)."""
    last: Entry | None = None
    for e in entries:
        if e.length == 0:
            continue
        if e.chunk is None and e.chunk_offset:
            e = e._replace(chunk_offset=0)
        if last is not None and _continues(last, e):
            last = Entry(last.offset, last.length + e.length, last.chunk, last.chunk_offset)
            continue
        if last is not None:
            yield last
        last = e
    if last is not None:
        yield last


class _Cursor:
    """A sorted, non-overlapping entry stream read forward, one entry ahead."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self._rest = iter(entries)
        self._head = next(self._rest, None)

    def over(self, start: int, stop: int) -> Iterator[Entry]:
        """The stream's pieces over [start, stop), zeros where it has none; entries before go."""
        while start < stop:
            while self._head is not None and self._head.end <= start:
                self._head = next(self._rest, None)
            head = self._head
            if head is None or head.offset > start:
                gap_end = stop if head is None else min(stop, head.offset)
                yield Entry(start, gap_end - start, None, 0)
                start = gap_end
                continue
            piece_end = min(stop, head.end)
            yield head.part(start, piece_end)
            start = piece_end


def _overlaid(base: Iterable[Entry], runs: Iterable[Entry], size: int) -> Iterator[Entry]:
    cursor = _Cursor(base)
    pos = 0
    for run in runs:
        if run.length == 0:
            continue
        if run.offset < pos or run.length < 0 or run.end > size:
            raise ValueError(f"run {run.offset}+{run.length} overlaps or lies past the disk")
        yield from cursor.over(pos, run.offset)
        yield run
        pos = run.end
    yield from cursor.over(pos, size)


def overlay(base: Iterable[Entry], runs: Iterable[Entry], size: int) -> Iterator[Entry]:
    """`base` with `runs` written over it, cut or zero-extended to `size`, coalesced.

    `base` must be sorted and not overlap, as a manifest is; `runs` must be sorted, not
    overlap and lie inside the disk (ValueError, raised as the bad run is reached). Bytes
    `base` does not cover read as zeros; `base` is read no further than `size`. Entries
    may be split at any byte.
    """
    return coalesce(_overlaid(base, runs, size))


def full_entries(runs: Iterable[Entry], size: int) -> Iterator[Entry]:
    """The entries of a full backup: `runs` of data, zeros everywhere else."""
    return overlay((), runs, size)


def check_cover(entries: Iterable[Entry], size: int) -> Iterator[Entry]:
    """`entries` passed on, raising ValueError where they leave a gap or do not end at `size`."""
    pos = 0
    for e in entries:
        if e.offset != pos or e.length <= 0:
            raise ValueError(f"entries leave a gap or overlap at offset {pos}")
        pos = e.end
        yield e
    if pos != size:
        raise ValueError(f"entries end at {pos}, not at the disk size {size}")
