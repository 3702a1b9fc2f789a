"""Manifest entries: runs of a disk naming part of a chunk or reading as zeros; their algebra."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def coalesce(entries: Iterable[Entry]) -> list[Entry]:
    """Join neighbours that continue one another (zeros after zeros, the same chunk onwards)."""
    out: list[Entry] = []
    for e in entries:
        if e.length == 0:
            continue
        if out and _continues(out[-1], e):
            last = out[-1]
            out[-1] = Entry(last.offset, last.length + e.length, last.chunk, last.chunk_offset)
        else:
            out.append(
                e if e.chunk is not None or e.chunk_offset == 0 else e._replace(chunk_offset=0)
            )
    return out


def overlay(base: Sequence[Entry], runs: Iterable[Entry], size: int) -> list[Entry]:
    """`base` with `runs` written over it, cut or zero-extended to `size`, coalesced.

    `runs` must be sorted, not overlap and lie inside the disk; bytes `base` does not
    cover read as zeros. Entries may be split at any byte.
    """
    out: list[Entry] = []
    j = 0

    def keep(start: int, stop: int) -> None:
        nonlocal j
        while start < stop:
            while j < len(base) and base[j].end <= start:
                j += 1
            if j == len(base) or base[j].offset > start:
                gap_end = stop if j == len(base) else min(stop, base[j].offset)
                out.append(Entry(start, gap_end - start, None, 0))
                start = gap_end
                continue
            piece_end = min(stop, base[j].end)
            out.append(base[j].part(start, piece_end))
            start = piece_end

    pos = 0
    for run in runs:
        if run.length == 0:
            continue
        if run.offset < pos or run.length < 0 or run.end > size:
            raise ValueError(f"run {run.offset}+{run.length} overlaps or lies past the disk")
        keep(pos, run.offset)
        out.append(run)
        pos = run.end
    keep(pos, size)
    return coalesce(out)


def full_entries(runs: Iterable[Entry], size: int) -> list[Entry]:
    """The entries of a full backup: `runs` of data, zeros everywhere else."""
    return overlay((), runs, size)


def check_cover(entries: Sequence[Entry], size: int) -> None:
    """Raise ValueError unless `entries` cover [0, size) in order without gaps."""
    pos = 0
    for e in entries:
        if e.offset != pos or e.length <= 0:
            raise ValueError(f"entries leave a gap or overlap at offset {pos}")
        pos = e.end
    if pos != size:
        raise ValueError(f"entries end at {pos}, not at the disk size {size}")
