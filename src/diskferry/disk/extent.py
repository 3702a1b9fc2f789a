"""Extent: a run of bytes of a volume and what is known of it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Extent:
    """A run of `length` bytes at `start`; `zero` reads as zeros; `dirty` changed since a point."""

    start: int
    length: int
    zero: bool
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
            and pending.zero == ext.zero
            and pending.dirty == ext.dirty
        ):
            pending = Extent(pending.start, pending.length + ext.length, ext.zero, ext.dirty)
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
            yield Extent(start, stop - start, ext.zero, ext.dirty)
