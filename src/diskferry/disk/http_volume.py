"""HttpVolume: a read-only volume over an HTTP(S) URL that supports Range."""

from __future__ import annotations

from diskferry.disk.errors import VolumeError
from diskferry.disk.http import HttpSource, RangeNotSupportedError
from diskferry.disk.volume import Volume


class HttpVolume(Volume):
    """Reads are single Range requests on pooled connections; safe from many threads."""

    readonly = True

    def __init__(self, source: HttpSource) -> None:
        self.source = source
        length, ranges = source.head()
        if length is None:
            raise VolumeError(f"{source.shown_url}: the server sends no Content-Length")
        if not ranges:
            raise RangeNotSupportedError(
                f"{source.shown_url}: the server does not accept Range requests"
            )
        self._size = length

    @property
    def size(self) -> int:
        """The size in bytes (Content-Length of the resource)."""
        return self._size

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` from `offset`; a break resumes from where it stopped."""
        view = memoryview(buf).cast("B")
        if offset + len(view) > self._size:
            raise VolumeError(f"read past the end of {self.source.shown_url}")
        done = 0
        reader = self.source.open_stream(offset, end=offset + len(view))
        try:
            while done < len(view):
                n = reader.readinto(view[done:])
                if n == 0:
                    raise VolumeError(f"short read at offset {offset + done}")
                done += n
        finally:
            reader.close()

    def close(self) -> None:
        """Close pooled connections."""
        self.source.close()
