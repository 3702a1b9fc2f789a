"""The copy engine: walks extents, skips holes and zero blocks, keeps many blocks in flight."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from diskferry.disk.errors import CancelledError
from diskferry.disk.extent import Extent
from diskferry.disk.progress import Progress
from diskferry.disk.volume import Volume
from diskferry.disk.zeros import data_runs

DEFAULT_BLOCK = 1 << 20
DEFAULT_MEMORY = 64 << 20


@dataclass
class CopyResult:
    """What a copy did: bytes read from the source, written, and left as zeros."""

    bytes_read: int = 0
    bytes_written: int = 0
    bytes_zero: int = 0


def _blocks(extents: Iterable[Extent], block: int) -> Iterator[Extent]:
    for ext in extents:
        if ext.zero:
            yield ext
            continue
        pos = ext.start
        while pos < ext.end:
            # align later blocks to the block size so writes stay aligned
            stop = min(ext.end, (pos // block + 1) * block)
            yield Extent(pos, stop - pos, zero=False, hole=ext.hole, dirty=ext.dirty)
            pos = stop


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
    otherwise they are zeroed on the target. At most `max_memory` bytes are in flight.
    """
    result = CopyResult()
    lock = threading.Lock()
    slots = max(1, max_memory // block_size)
    buffers: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
    for _ in range(slots):
        buffers.put(bytearray(block_size))
    free = threading.Semaphore(slots)
    failed = threading.Event()

    def count(read: int, written: int, zero: int, length: int) -> None:
        with lock:
            result.bytes_read += read
            result.bytes_written += written
            result.bytes_zero += zero
        if progress is not None:
            progress.add(length)

    def cancelled() -> bool:
        return failed.is_set() or (cancel is not None and cancel.is_set())

    def zero_run(ext: Extent) -> None:
        if cancelled():
            return
        if not dst_zeroed:
            dst.zero(ext.start, ext.length)
        count(0, 0, ext.length, ext.length)

    def copy_block(ext: Extent) -> None:
        buf = buffers.get()
        try:
            if cancelled():
                return
            view = memoryview(buf)[: ext.length]
            src.read_into(ext.start, view)
            written = 0
            pos = 0
            for start, end in data_runs(view):
                if start > pos and not dst_zeroed:
                    dst.zero(ext.start + pos, start - pos)
                dst.write(ext.start + start, view[start:end])
                written += end - start
                pos = end
            if pos < ext.length and not dst_zeroed:
                dst.zero(ext.start + pos, ext.length - pos)
            count(ext.length, written, ext.length - written, ext.length)
        finally:
            buffers.put(buf)
            free.release()

    def note_failure(future: Future[None]) -> None:
        if not future.cancelled() and future.exception() is not None:
            failed.set()

    if extents is None:
        extents = src.extents("zero")
    pending: set[Future[None]] = set()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="copy") as pool:
        try:
            for ext in _blocks(extents, block_size):
                if cancelled():
                    break
                if not ext.zero:
                    free.acquire()
                future = pool.submit(zero_run if ext.zero else copy_block, ext)
                future.add_done_callback(note_failure)
                pending.add(future)
                if len(pending) > 4 * slots:
                    pending = {f for f in pending if not f.done() or f.exception()}
        except BaseException:
            failed.set()
            raise
        finally:
            wait(pending)
    for f in pending:
        if f.exception() is not None:
            raise f.exception()  # type: ignore[misc]
    if cancel is not None and cancel.is_set():
        raise CancelledError("copy cancelled")
    return result
