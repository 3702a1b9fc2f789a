"""Compressed streams of a volume: parallel gzip (concatenated members), multi-threaded zstd.

gzip is deflated by libdeflate, a whole block at a time: the same format and, at the same
level, a size no larger than zlib's, in about half of zlib's time (zlib-ng's takes 1.4 times
libdeflate's on disk data).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator

import deflate
import zstandard

from diskferry.base.cpus import usable_cpus
from diskferry.disk.extent import Extent
from diskferry.disk.volume import Volume
from diskferry.export.blocks import BlockPool, blocks, ordered_map, pieces, read_piece

GZIP_LEVEL = 6
ZSTD_LEVEL = 3


def _gzip_member(data: bytes | memoryview) -> bytearray:
    return deflate.gzip_compress(data, GZIP_LEVEL)


@functools.lru_cache(maxsize=8)
def _gzip_zeros(length: int) -> bytes:
    return bytes(_gzip_member(bytes(length)))


def _gzip_piece(volume: Volume, piece: Extent) -> bytes | bytearray:
    if piece.zero:
        return _gzip_zeros(piece.length)
    return _gzip_member(read_piece(volume, piece))


def gzip_stream(
    volume: Volume, offset: int = 0, length: int | None = None
) -> AsyncIterator[bytes | bytearray]:
    """The range as gzip: each 1 MiB block a member, compressed on a thread per usable CPU."""
    if length is None:
        length = volume.size - offset
    workers = max(2, usable_cpus())
    return ordered_map(
        lambda p: _gzip_piece(volume, p), pieces(volume, offset, length), ahead=workers * 2
    )


async def zstd_stream(
    volume: Volume, pool: BlockPool, offset: int = 0, length: int | None = None
) -> AsyncIterator[bytes]:
    """The range as one zstd frame, compressed by zstd's own threads, one per usable CPU."""
    if length is None:
        length = volume.size - offset
    loop = asyncio.get_running_loop()
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=usable_cpus())
    cobj = cctx.compressobj(size=length)
    async for block in blocks(volume, offset, length, pool):
        out = await loop.run_in_executor(None, cobj.compress, block)
        if out:
            yield out
    yield cobj.flush()
