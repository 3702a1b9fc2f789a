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
    otherwise they are zeroed on the target. Data is read in runs of up to `src.run_size`
    (one request each on a remote source), each run block by block into the same buffer.
    At most `max_memory` bytes of blocks are held: each of the threads copying holds one block.
    """
    threads = max(1, min(workers, max_memory // block_size))
    buffers: queue.SimpleQueue[bytearray] = queue.SimpleQueue()

    def done(n: int) -> None:
        if progress is not None:
            progress.add(n)

    def copy_run(run: Extent) -> tuple[int, int]:
        if run.zero:
            if not dst_zeroed:
                zero_range(dst, run.start, run.length, cancel)
            done(run.length)
            return 0, 0
        try:
            buf = buffers.get_nowait()
        except queue.Empty:
            buf = bytearray(block_size)
        written = 0
        try:
            with src.open_run(run.start, run.length) as reader:
                for block in split([run], block_size):
                    check_cancel(cancel)
                    view = memoryview(buf)[: block.length]
                    reader.read_into(view)
                    written += write_block(
                        dst, block.start, view, dst_zeroed=dst_zeroed, cancel=cancel
                    )
                    done(block.length)
        finally:
            buffers.put(buf)
        return run.length, written

    if extents is None:
        extents = src.extents("zero")
    result = CopyResult()
    # a run is cut from its start (its blocks stay aligned); without runs, blocks are aligned
    run_size = max(block_size, src.run_size or block_size)
    runs = split(extents, run_size, aligned=src.run_size is None)
    for run, (read, written) in parallel_map(
        lambda run: (run, copy_run(run)), runs, threads=threads, cancel=cancel, ordered=False
    ):
        result.bytes_read += read
        result.bytes_written += written
        result.bytes_zero += run.length - written
    check_cancel(cancel)
    return result
