"""Reading a range of a Volume from asyncio: 1 MiB blocks, a few reads ahead, holes unread."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TypeVar

from diskferry.disk.volume import Volume

BLOCK = 1 << 20
ZEROS = memoryview(bytes(BLOCK))
_EXTENT_BATCH = 256
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Piece:
    """At most one block of the range: `zero` pieces are holes and are never read."""

    offset: int
    length: int
    zero: bool


def _split(volume: Volume, offset: int, length: int) -> Iterator[Piece]:
    for ext in volume.extents("zero", offset, length):
        pos = ext.start
        while pos < ext.end:
            n = min(BLOCK, ext.end - pos)
            yield Piece(pos, n, ext.zero)
            pos += n


async def pieces(volume: Volume, offset: int, length: int) -> AsyncIterator[Piece]:
    """The pieces covering [offset, offset+length), the extent walk run off the event loop."""
    loop = asyncio.get_running_loop()
    it = _split(volume, offset, length)
    while batch := await loop.run_in_executor(None, lambda: list(islice(it, _EXTENT_BATCH))):
        for piece in batch:
            yield piece


def read_piece(volume: Volume, piece: Piece) -> bytes | memoryview:
    """The bytes of `piece` (a hole is a slice of a shared zero block)."""
    if piece.zero:
        return ZEROS[: piece.length]
    return volume.read(piece.offset, piece.length)


async def ordered_map(
    fn: Callable[[Piece], T], source: AsyncIterator[Piece], ahead: int = 4
) -> AsyncIterator[T]:
    """`fn(piece)` for each piece, run in threads with at most `ahead` in flight, in order."""
    loop = asyncio.get_running_loop()
    pending: deque[asyncio.Future[T]] = deque()
    try:
        async for piece in source:
            pending.append(loop.run_in_executor(None, fn, piece))
            if len(pending) >= ahead:
                yield await pending.popleft()
        while pending:
            yield await pending.popleft()
    finally:
        for fut in pending:
            fut.cancel()


def blocks(
    volume: Volume, offset: int, length: int, ahead: int = 4
) -> AsyncIterator[bytes | memoryview]:
    """The bytes of [offset, offset+length) in blocks of at most 1 MiB."""
    return ordered_map(lambda p: read_piece(volume, p), pieces(volume, offset, length), ahead)
