"""The copy engine: walks extents, skips holes and zero blocks, keeps many blocks in flight."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from diskferry.disk.blocks import split, write_block, zero_range
from diskferry.disk.errors import check_cancel
from diskferry.disk.extent import Extent
from diskferry.disk.parallel import parallel_map
from diskferry.disk.progress import Progress
from diskferry.disk.volume import Volume

DEFAULT_BLOCK = 1 << 20
DEFAULT_MEMORY = 64 << 20


@dataclass
class CopyResult:
    """What a copy did: bytes read from the source, written, and left as zeros."""

    bytes_read: int = 0
    bytes_written: int = 0
    bytes_zero: int = 0


def copy(
    src: Volume,
    dst: Volume,
    *,
    extents: Iterable[Extent] | None = None,
    progress: Progress | None = None,
    dst_zeroed: bool = False,
    block_size: int = DEFAULT_BLOCK,
    workers: int = 4,
    max_memory: int = DEFAULT_MEMORY,
    cancel: threading.Event | None = None,
) -> CopyResult:
    """Copy `extents` (default: all of `src`, holes known) from `src` to `dst` at equal offsets.

    Holes are never read; blocks read as all zeros are not written. Where `dst_zeroed`
    says the target already reads as zeros (a new sparse file) zero runs cost nothing,
    otherwise they are zeroed on the target. At most `max_memory` bytes of blocks are held:
    each of the threads copying holds one block.
    """
    threads = max(1, min(workers, max_memory // block_size))
    buffers: queue.SimpleQueue[bytearray] = queue.SimpleQueue()

    def copy_block(ext: Extent) -> tuple[int, int]:
        if ext.zero:
            if not dst_zeroed:
                zero_range(dst, ext.start, ext.length, cancel)
            return 0, 0
        try:
            buf = buffers.get_nowait()
        except queue.Empty:
            buf = bytearray(block_size)
        try:
            view = memoryview(buf)[: ext.length]
            src.read_into(ext.start, view)
            return ext.length, write_block(
                dst, ext.start, view, dst_zeroed=dst_zeroed, cancel=cancel
            )
        finally:
            buffers.put(buf)

    if extents is None:
        extents = src.extents("zero")
    result = CopyResult()
    blocks = split(extents, block_size)
    for ext, (read, written) in parallel_map(
        lambda ext: (ext, copy_block(ext)), blocks, threads=threads, cancel=cancel, ordered=False
    ):
        result.bytes_read += read
        result.bytes_written += written
        result.bytes_zero += ext.length - written
        if progress is not None:
            progress.add(ext.length)
    check_cancel(cancel)
    return result
