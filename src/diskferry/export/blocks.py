"""Reading a range of a Volume from asyncio: 1 MiB blocks, a few reads ahead, holes unread."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from itertools import islice
from typing import TypeVar

from diskferry.disk.blocks import split
from diskferry.disk.extent import Extent
from diskferry.disk.volume import Volume

BLOCK = 1 << 20
ZEROS = memoryview(bytes(BLOCK))
_EXTENT_BATCH = 256
T = TypeVar("T")


async def pieces(volume: Volume, offset: int, length: int) -> AsyncIterator[Extent]:
    """The blocks covering [offset, offset+length), the extent walk run off the event loop."""
    loop = asyncio.get_running_loop()
    it = split(volume.extents("zero", offset, length), BLOCK, BLOCK, aligned=False)
    while batch := await loop.run_in_executor(None, lambda: list(islice(it, _EXTENT_BATCH))):
        for piece in batch:
            yield piece


def read_piece(volume: Volume, piece: Extent) -> bytes | memoryview:
    """The bytes of `piece` (a zero block is a slice of a shared zero block)."""
    if piece.zero:
        return ZEROS[: piece.length]
    return volume.read(piece.start, piece.length)


async def ordered_map(
    fn: Callable[[Extent], T], source: AsyncIterator[Extent], ahead: int = 4
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
