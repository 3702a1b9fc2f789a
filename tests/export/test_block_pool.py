"""The export server's block pool: many streams read byte-exact through a few shared buffers,
a stream ended early gives back what it held, and no two streams ever share a buffer at once."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from diskferry.disk.file_volume import FileVolume
from diskferry.export.blocks import BlockPool, blocks

MiB = 1 << 20


def _image(path: Path) -> bytes:
    """8 MiB: data, a hole, data ending mid-block."""
    data = os.urandom(3 * MiB) + bytes(3 * MiB) + os.urandom(2 * MiB - 4096)
    with path.open("wb") as f:
        f.write(data[: 3 * MiB])
        f.seek(6 * MiB)
        f.write(data[6 * MiB :])
    return data


async def _read_all(volume: FileVolume, pool: BlockPool, owners: dict[int, int], me: int) -> bytes:
    out = bytearray()
    async for block in blocks(volume, 0, volume.size, pool):
        if isinstance(block.obj, bytearray):
            key = id(block.obj)
            assert owners.setdefault(key, me) == me, "a buffer held by two streams at once"
            out += block
            await asyncio.sleep(0)
            del owners[key]
        else:
            out += block
    return bytes(out)


def test_many_streams_read_exactly_through_a_small_pool(tmp_path: Path) -> None:
    data = _image(tmp_path / "disk.raw")

    async def main() -> tuple[list[bytes], int]:
        pool = BlockPool(6)
        owners: dict[int, int] = {}
        with FileVolume(tmp_path / "disk.raw") as volume:
            reads = [_read_all(volume, pool, owners, i) for i in range(12)]
            return await asyncio.gather(*reads), pool.made

    results, made = asyncio.run(main())
    assert all(r == data for r in results)
    assert made <= 6


def test_a_stream_closed_early_gives_its_buffers_back(tmp_path: Path) -> None:
    _image(tmp_path / "disk.raw")

    async def main() -> int:
        pool = BlockPool(4)
        with FileVolume(tmp_path / "disk.raw") as volume:
            for _ in range(5):
                stream = blocks(volume, 0, volume.size, pool)
                await anext(stream)
                await stream.aclose()
            held = [await asyncio.wait_for(pool.take(), 5) for _ in range(4)]
            return len(held)

    assert asyncio.run(main()) == 4
