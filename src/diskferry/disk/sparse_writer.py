"""SparseWriter: writes a stream into a volume in order, leaving zero blocks as holes."""

from __future__ import annotations

import queue
import threading

from diskferry.base.errors import CancelledError, DiskferryError, check_cancel
from diskferry.disk.blocks import write_block
from diskferry.disk.decompress import Readable
from diskferry.disk.progress import Progress
from diskferry.disk.volume import Volume

_DEPTH = 8


class ImageTooLargeError(DiskferryError):
    """A stream grew past the size it was allowed to reach."""

    reason = "ImageTooLarge"


class SparseWriter:
    """Sequential writes into `volume` from `start`, in blocks; zero blocks are skipped.

    Where `dst_zeroed` is false (a block device, or a reused file) zero blocks are zeroed
    on the volume instead. Writing runs on a background thread so the producer (a
    download or a decompressor) keeps going. `limit` bounds how far the stream may go.
    """

    def __init__(
        self,
        volume: Volume,
        *,
        start: int = 0,
        block_size: int = 1 << 20,
        dst_zeroed: bool = True,
        limit: int | None = None,
        limit_message: str = "the stream is larger than the target",
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.volume = volume
        self.offset = start
        self.bytes_written = 0
        self.bytes_zero = 0
        self._block = block_size
        self._dst_zeroed = dst_zeroed
        self._limit = limit
        self._limit_message = limit_message
        self._progress = progress
        self._cancel = cancel
        self._buf = bytearray()
        self._queue: queue.Queue[tuple[int, bytes] | None] = queue.Queue(_DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="sparse-writer", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue
            offset, data = item
            try:
                self._store(offset, data)
            except BaseException as e:
                self._error = e

    def _store(self, offset: int, data: bytes) -> None:
        written = write_block(
            self.volume, offset, data, dst_zeroed=self._dst_zeroed, cancel=self._cancel
        )
        self.bytes_written += written
        self.bytes_zero += len(data) - written

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        check_cancel(self._cancel)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Append `data` to the stream."""
        self._check()
        n = len(data)
        if self._limit is not None and self.offset + len(self._buf) + n > self._limit:
            raise ImageTooLargeError(self._limit_message)
        if self._progress is not None:
            self._progress.add(n)
        if not self._buf and n == self._block and isinstance(data, bytes):
            self._put(data)  # a whole block as it came: no copy
            return
        self._buf += data
        if len(self._buf) >= self._block:
            whole = len(self._buf) - len(self._buf) % self._block
            view = memoryview(self._buf)
            for pos in range(0, whole, self._block):
                self._put(bytes(view[pos : pos + self._block]))
            view.release()
            del self._buf[:whole]

    def _put(self, block: bytes) -> None:
        self._queue.put((self.offset, block))
        self.offset += len(block)

    def close(self) -> int:
        """Write what is buffered, wait for the writer, and return the stream's length."""
        if self._buf:
            self._put(bytes(self._buf))
            self._buf.clear()
        self._queue.put(None)
        self._thread.join()
        self._check()
        return self.offset

    def write_from(self, stream: Readable, block: int = 1 << 20) -> int:
        """Write all of `stream` and close; on any error stop the writer and re-raise."""
        try:
            while data := stream.read(block):
                self.write(data)
            return self.close()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop the writer thread without writing what is buffered."""
        self._error = self._error or CancelledError("aborted")
        self._queue.put(None)
        self._thread.join()
