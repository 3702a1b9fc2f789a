"""Extent: a run of bytes of a volume and what is known of it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class Extent:
    """A run of `length` bytes at `start` and what is known of it.

    `zero`: it reads as zeros and may be skipped. `hole`: it is unallocated, which over a
    backing file need not read as zeros, so a hole that is not zero is read like data.
    `dirty`: it changed since a checkpoint.
    """

    start: int
    length: int
    zero: bool
    hole: bool = False
    dirty: bool | None = None

    @property
    def end(self) -> int:
        """The offset just past the extent."""
        return self.start + self.length

    def to_json(self) -> dict[str, int | str]:
        """The extent in the shared backup-map shape."""
        kind = "zero" if self.zero else "data"
        if self.dirty:
            kind = "dirty"
        return {"offset": self.start, "length": self.length, "type": kind}


def merge_adjacent(extents: Iterable[Extent]) -> Iterator[Extent]:
    """Join neighbouring extents that say the same thing."""
    pending: Extent | None = None
    for ext in extents:
        if ext.length == 0:
            continue
        if (
            pending is not None
            and pending.end == ext.start
            and (pending.zero, pending.hole, pending.dirty) == (ext.zero, ext.hole, ext.dirty)
        ):
            pending = replace(pending, length=pending.length + ext.length)
            continue
        if pending is not None:
            yield pending
        pending = ext
    if pending is not None:
        yield pending


def clip(extents: Iterable[Extent], offset: int, length: int) -> Iterator[Extent]:
    """The parts of `extents` that fall inside [offset, offset + length)."""
    end = offset + length
    for ext in extents:
        start = max(ext.start, offset)
        stop = min(ext.end, end)
        if start < stop:
            yield replace(ext, start=start, length=stop - start)
