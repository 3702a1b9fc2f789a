"""The copy loop's pieces: extents cut into blocks, blocks stored with their zeros left out.

Every engine that moves bytes (copy, backup, restore, export, the sparse writer) walks
extents and writes blocks through these, so zero detection, the bounded size of a zero
range and the points where a cancel is seen are the same everywhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from diskferry.base.errors import check_cancel
from diskferry.disk.extent import Extent
from diskferry.disk.volume import Volume
from diskferry.disk.zeros import data_runs

# the most one zero call covers, so a cancel is seen between calls even on a huge range
ZERO_STEP = 64 << 20


class _Run(Protocol):
    @property
    def length(self) -> int: ...


T = TypeVar("T", bound=_Run)


def packed(
    items: Iterable[T],
    limit: int,
    alone: Callable[[T], bool] = lambda _: False,
) -> Iterator[list[T]]:
    """The runs in lists of up to `limit` bytes in all (one larger run by itself); a run
    `alone` says is its own list, as it comes, while the others go on filling theirs."""
    batch: list[T] = []
    size = 0
    for item in items:
        if alone(item):
            yield [item]
            continue
        if batch and size + item.length > limit:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += item.length
    if batch:
        yield batch


def split(
    extents: Iterable[Extent],
    block_size: int,
    zero_size: int | None = None,
    *,
    aligned: bool = True,
) -> Iterator[Extent]:
    """The extents cut into blocks of at most `block_size` (zero ones, `zero_size`).

    `aligned` cuts at multiples of the size, so that writes after an extent's first block
    stay aligned; otherwise each extent is cut from its start, into fewer pieces.
    `zero_size` defaults to the larger of `block_size` and ZERO_STEP.
    """
    zero_size = zero_size or max(block_size, ZERO_STEP)
    for ext in extents:
        size = zero_size if ext.zero else block_size
        if ext.length <= size and not (aligned and ext.start // size != (ext.end - 1) // size):
            yield ext
            continue
        pos = ext.start
        while pos < ext.end:
            stop = min(ext.end, (pos // size + 1) * size if aligned else pos + size)
            yield Extent(pos, stop - pos, zero=ext.zero, hole=ext.hole, dirty=ext.dirty)
            pos = stop


def zero_range(
    dst: Volume, offset: int, length: int, cancel: threading.Event | None = None
) -> None:
    """Make [offset, offset + length) of `dst` read as zeros, ZERO_STEP at a time."""
    end = offset + length
    while offset < end:
        check_cancel(cancel)
        step = min(end, (offset // ZERO_STEP + 1) * ZERO_STEP) - offset
        dst.zero(offset, step)
        offset += step


def write_block(
    dst: Volume,
    offset: int,
    data: bytes | bytearray | memoryview,
    *,
    dst_zeroed: bool,
    cancel: threading.Event | None = None,
) -> int:
    """Write `data` at `offset` but its zero runs, which are zeroed unless `dst_zeroed`.

    Returns the bytes written as data; the rest of `data` was left (or made) zeros.
    """
    view = memoryview(data).cast("B")
    written = 0
    pos = 0
    for start, end in data_runs(view):
        if start > pos and not dst_zeroed:
            zero_range(dst, offset + pos, start - pos, cancel)
        dst.write(offset + start, view[start:end])
        written += end - start
        pos = end
    if pos < len(view) and not dst_zeroed:
        zero_range(dst, offset + pos, len(view) - pos, cancel)
    return written
