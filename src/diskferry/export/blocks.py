"""Reading a range of a Volume from asyncio: 1 MiB blocks, a few reads ahead, holes unread,
into buffers of one pool that every stream of a server shares."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from itertools import islice
from typing import TypeVar

from diskferry.disk.blocks import split
from diskferry.disk.extent import Extent
from diskferry.disk.volume import Volume

BLOCK = 1 << 20
ZEROS = memoryview(bytes(BLOCK))
POOL_BLOCKS = 48
_EXTENT_BATCH = 256
T = TypeVar("T")


class BlockPool:
    """A fixed number of BLOCK-sized buffers, made as first needed and reused: what a server's
    streams hold of read data is the pool's size however many streams there are."""

    def __init__(self, count: int = POOL_BLOCKS) -> None:
        self._free: list[bytearray] = []
        self._made = 0
        self._count = count
        self._slots = asyncio.Semaphore(count)

    @property
    def exhausted(self) -> bool:
        """Whether taking a buffer now would wait."""
        return self._slots.locked()

    async def take(self) -> bytearray:
        """A buffer, waiting for one given back when all are in use."""
        await self._slots.acquire()
        if self._free:
            return self._free.pop()
        self._made += 1
        return bytearray(BLOCK)

    def give(self, buf: bytearray) -> None:
        """Return `buf` to the pool."""
        self._free.append(buf)
        self._slots.release()

    @property
    def made(self) -> int:
        """How many buffers were ever made."""
        return self._made


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


async def _then_none(source: AsyncIterator[T]) -> AsyncIterator[T | None]:
    """`source`'s items, then None."""
    async for item in source:
        yield item
    yield None


async def blocks(
    volume: Volume, offset: int, length: int, pool: BlockPool, ahead: int = 4
) -> AsyncIterator[memoryview]:
    """The bytes of [offset, offset+length) in blocks of at most 1 MiB, read `ahead` blocks
    ahead into `pool`'s buffers; each block is valid until the next is asked for.

    A stream waits for a buffer only when it holds none, so streams never wait on each other
    in a circle; a read still running when the stream ends gives its buffer back when done."""
    loop = asyncio.get_running_loop()
    pending: deque[_Read] = deque()
    held: _Read | None = None
    try:
        async for piece in _then_none(pieces(volume, offset, length)):
            while pending and (
                piece is None or len(pending) >= ahead or (not piece.zero and pool.exhausted)
            ):
                held = pending.popleft()
                if held.future is not None:
                    await asyncio.shield(held.future)
                yield held.view
                held.give_back(pool)
                held = None
            if piece is None:
                break
            if piece.zero:
                pending.append(_Read(None, ZEROS[: piece.length], None))
                continue
            buf = await pool.take()
            view = memoryview(buf)[: piece.length]
            read = loop.run_in_executor(None, volume.read_into, piece.start, view)
            pending.append(_Read(read, view, buf))
    finally:
        for left in ([held] if held is not None else []) + list(pending):
            left.give_back(pool)


@dataclass
class _Read:
    """A block being read (or read) into a buffer of the pool; zeros have no buffer."""

    future: asyncio.Future[None] | None
    view: memoryview
    buf: bytearray | None

    def give_back(self, pool: BlockPool) -> None:
        """The buffer back to `pool`: now when its read is over, else when it ends."""
        buf, self.buf = self.buf, None
        if buf is None:
            return
        if self.future is None or self.future.done():
            pool.give(buf)
        else:
            self.future.add_done_callback(lambda _: pool.give(buf))
