"""HttpVolume: a read-only volume over an HTTP(S) URL that supports Range."""

from __future__ import annotations

import threading

from diskferry.disk.errors import VolumeError
from diskferry.disk.http import HttpSource, RangeNotSupportedError, ResumingReader
from diskferry.disk.volume import RunReader, Volume

# each request waits for its answer: a copy asks for runs of up to this much in one request
RUN_SIZE = 64 << 20


class HttpVolume(Volume):
    """Reads are Range requests on pooled, kept-alive connections; safe from many threads.

    A run (`open_run`) is one request whose body is read block by block. `size` and
    `validator` are what a GET of the resource said when it said Range is accepted; without
    `size`, a HEAD asks. With a validator, every request names it in If-Range, so that reads
    of a resource that changed fail instead of mixing two versions. `cancel` stops a run
    waiting to resume.
    """

    readonly = True
    run_size = RUN_SIZE

    def __init__(
        self,
        source: HttpSource,
        *,
        size: int | None = None,
        validator: str | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.source = source
        self.validator = validator
        self.cancel = cancel
        self.resumes = 0  # of the runs read whole
        self._lock = threading.Lock()
        if size is None:
            size, ranges = source.head()
            if size is None:
                raise VolumeError(f"{source.shown_url}: the server sends no Content-Length")
            if not ranges:
                raise RangeNotSupportedError(
                    f"{source.shown_url}: the server does not accept Range requests"
                )
        self._size = size

    @property
    def size(self) -> int:
        """The size in bytes (Content-Length of the resource)."""
        return self._size

    def open_run(self, offset: int, length: int) -> RunReader:
        """One Range request for the `length` bytes at `offset`; a break resumes it."""
        if offset + length > self._size:
            raise VolumeError(f"read past the end of {self.source.shown_url}")
        return _HttpRun(self, offset, length)

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` from `offset` with one Range request; a break resumes where it stopped."""
        with self.open_run(offset, len(buf)) as run:
            run.read_into(buf)

    def count_resumes(self, n: int) -> None:
        """Add the `n` resumes of a run to `resumes`."""
        with self._lock:
            self.resumes += n

    def close(self) -> None:
        """Close pooled connections."""
        self.source.close()

    def __str__(self) -> str:
        return self.source.shown_url


class _HttpRun(RunReader):
    """A run read from one response body; the connection goes back to the pool once read whole."""

    def __init__(self, volume: HttpVolume, offset: int, length: int) -> None:
        super().__init__(volume, offset, length)
        self._volume = volume
        self._reader: ResumingReader | None = (
            volume.source.open_stream(offset, volume.cancel, offset + length, volume.validator)
            if length
            else None
        )

    def _fill(self, buf: memoryview | bytearray) -> None:
        view = memoryview(buf).cast("B")
        done = 0
        while done < len(view):
            assert self._reader is not None
            n = self._reader.readinto(view[done:])
            if n == 0:
                raise VolumeError(f"short read at offset {self.position + done}")
            done += n

    def close(self) -> None:
        """Give the connection back, or drop it when the body was not read whole."""
        if self._reader is not None:
            self._volume.count_resumes(self._reader.resumes)
            self._reader.close()
            self._reader = None
