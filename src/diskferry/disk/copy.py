"""The copy engine: walks extents, skips holes and zero blocks, keeps many blocks in flight."""

from __future__ import annotations

import mmap
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from diskferry.base.errors import check_cancel
from diskferry.disk.blocks import packed, split, write_block, zero_range
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
    (one request each on a remote source), each run block by block into the same buffer;
    a source without runs has as many blocks as fit in one buffer read at once (all in
    flight on a volume that can). At most `max_memory` bytes of blocks are held: each of
    the threads copying holds one buffer of `block_size`.
    """
    threads = max(1, min(workers, max_memory // block_size))
    buffers: queue.SimpleQueue[mmap.mmap] = queue.SimpleQueue()
    result = CopyResult()

    def done(n: int) -> None:
        if progress is not None:
            progress.add(n)

    def copy_task(task: list[Extent]) -> tuple[int, int]:
        if task[0].zero:
            zero_range(dst, task[0].start, task[0].length, cancel)
            done(task[0].length)
            return 0, 0
        try:
            buf = buffers.get_nowait()
        except queue.Empty:
            # page-aligned, so that a target may write it around the page cache
            buf = mmap.mmap(-1, block_size)
        try:
            if src.run_size is None:
                return copy_blocks(task, memoryview(buf))
            return copy_run(task[0], memoryview(buf))
        finally:
            buffers.put(buf)

    def copy_blocks(blocks: list[Extent], buf: memoryview) -> tuple[int, int]:
        """Blocks packed into one buffer, read with all their requests in flight, then stored."""
        views, at = [], 0
        for block in blocks:
            views.append((block.start, buf[at : at + block.length]))
            at += block.length
        check_cancel(cancel)
        src.read_into_many(views)
        written = 0
        for offset, view in views:
            written += write_block(dst, offset, view, dst_zeroed=dst_zeroed, cancel=cancel)
        done(at)
        return at, written

    def copy_run(run: Extent, buf: memoryview) -> tuple[int, int]:
        """One run read block by block into the same buffer, each block stored as it comes."""
        written = 0
        with src.open_run(run.start, run.length) as reader:
            for block in split([run], block_size):
                check_cancel(cancel)
                view = buf[: block.length]
                reader.read_into(view)
                written += write_block(dst, block.start, view, dst_zeroed=dst_zeroed, cancel=cancel)
                done(block.length)
        return run.length, written

    def tasks() -> Iterator[list[Extent]]:
        """Zero runs alone (counted here when the target reads as zeros already), a remote
        source's runs alone, other data blocks packed as many as one buffer holds."""
        remote = src.run_size is not None
        for task in packed(runs, block_size, alone=lambda e: e.zero or remote):
            if task[0].zero and dst_zeroed:
                done(task[0].length)
                result.bytes_zero += task[0].length
            else:
                yield task

    if extents is None:
        extents = src.extents("zero")
    # a run is cut from its start (its blocks stay aligned); without runs, blocks are aligned
    run_size = max(block_size, src.run_size or block_size)
    runs = split(extents, run_size, aligned=src.run_size is None)
    for length, (read, written) in parallel_map(
        lambda task: (sum(e.length for e in task), copy_task(task)),
        tasks(),
        threads=threads,
        cancel=cancel,
        ordered=False,
    ):
        result.bytes_read += read
        result.bytes_written += written
        result.bytes_zero += length - written
    check_cancel(cancel)
    return result
