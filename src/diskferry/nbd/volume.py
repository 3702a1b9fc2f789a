"""NbdVolume: an NBD export as a Volume, with extents from base:allocation and dirty bitmaps."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent, merge_adjacent
from diskferry.disk.volume import ExtentContext, Volume
from diskferry.nbd import protocol as p
from diskferry.nbd.client import DEFAULT_REQUEST_TIMEOUT, NbdClient
from diskferry.nbd.errors import NbdConnectionError, NbdError

ALLOCATION = "base:allocation"
DIRTY_BITMAP = "qemu:dirty-bitmap:"
_ZERO_WRITE_BLOCK = 1 << 20


class NbdVolume(Volume):
    """An NBD export; `extents("dirty")` needs the dirty bitmap named at open."""

    def __init__(self, client: NbdClient, *, writable: bool, bitmap: str | None = None) -> None:
        self.client = client
        self.bitmap = bitmap
        self.readonly = not writable or client.readonly
        self.sparse = client.can_zero or client.can_trim

    @classmethod
    def open(
        cls,
        url: str,
        *,
        writable: bool = False,
        bitmap: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        cancel: threading.Event | None = None,
    ) -> NbdVolume:
        """Connect to the export at `url`; `bitmap` names a qemu dirty bitmap it exports.

        A request unanswered for `request_timeout` seconds breaks the connection; once
        `cancel` is set, waiting reads and writes raise CancelledError.
        """
        contexts = [ALLOCATION] + ([DIRTY_BITMAP + bitmap] if bitmap else [])
        client = NbdClient.connect(
            url, contexts=contexts, request_timeout=request_timeout, cancel=cancel
        )
        try:
            if writable and client.readonly:
                raise NbdError(
                    f"NBD export {client.url} is read-only: export it writable to write to it",
                    errno_name="EPERM",
                )
            if bitmap and DIRTY_BITMAP + bitmap not in client.contexts:
                offered = client.info.available.get(DIRTY_BITMAP + bitmap, [])
                names = ", ".join(n.removeprefix(DIRTY_BITMAP) for n in offered) or "none"
                raise NbdError(
                    f"NBD export {client.url} has no dirty bitmap {bitmap!r} "
                    f"(it offers: {names}): export the bitmap with the disk",
                    errno_name="ENOENT",
                )
        except BaseException:
            client.close()
            raise
        return cls(client, writable=writable, bitmap=bitmap)

    def __repr__(self) -> str:
        return f"NbdVolume({str(self.client.url)!r})"

    @property
    def size(self) -> int:
        """The export's size in bytes."""
        return self.client.size

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` with the bytes at `offset`."""
        self.client.read_into(offset, buf)

    def read_into_many(self, pieces: Sequence[tuple[int, memoryview]]) -> None:
        """Fill each `(offset, buf)` of `pieces`, all requests sent before any is waited for."""
        self.client.read_many(pieces)

    def write(self, offset: int, data: bytes | memoryview | bytearray) -> None:
        """Write `data` at `offset`."""
        self._writable()
        self.client.write(offset, data)

    def zero(self, offset: int, length: int) -> None:
        """Write-zeroes, punching holes where the server can; plain zeros when it cannot."""
        self._writable()
        if length <= 0:
            return
        if self.client.can_zero:
            self.client.write_zeroes(offset, length)
            return
        block = bytes(min(length, _ZERO_WRITE_BLOCK))
        for at in range(offset, offset + length, len(block)):
            self.client.write(at, memoryview(block)[: min(len(block), offset + length - at)])

    def flush(self) -> None:
        """Make what was written durable on the server."""
        self.client.flush()

    def extents(
        self, context: ExtentContext = "zero", offset: int = 0, length: int | None = None
    ) -> Iterator[Extent]:
        """Zeros and holes from base:allocation, or dirty runs from the bitmap given at open."""
        end = self.size if length is None else min(self.size, offset + length)
        name = ALLOCATION if context == "zero" else DIRTY_BITMAP + (self.bitmap or "")
        if name not in self.client.contexts:
            yield from super().extents(context, offset, end - offset)
            return
        yield from merge_adjacent(self._walk(name, context, offset, end))

    def _walk(self, name: str, context: ExtentContext, offset: int, end: int) -> Iterator[Extent]:
        """Block status in pieces: the server answers for a prefix, so ask again from its end."""
        block = self.client.info.min_block
        pos = offset - offset % block
        while pos < end:
            descriptors = self.client.block_status(pos, end - pos).get(name)
            if not descriptors:
                raise NbdConnectionError(
                    f"NBD server {self.client.url} sent no {name} status at offset {pos}"
                )
            for length, flags in descriptors:
                start, stop = max(pos, offset), min(pos + length, end)
                if start < stop:
                    yield _extent(context, start, stop - start, flags)
                pos += length
                if pos >= end:
                    return
            if not any(length for length, _ in descriptors):
                raise NbdConnectionError(
                    f"NBD server {self.client.url} sent empty {name} status at offset {pos}"
                )

    def _writable(self) -> None:
        if self.readonly:
            raise VolumeError(f"{self.client.url} is open read-only")

    def close(self) -> None:
        """Disconnect from the server."""
        self.client.close()


def _extent(context: ExtentContext, start: int, length: int, flags: int) -> Extent:
    if context == "zero":
        # Only STATE_ZERO says the range reads as zeros: a hole over a backing file need not.
        return Extent(
            start, length, zero=bool(flags & p.STATE_ZERO), hole=bool(flags & p.STATE_HOLE)
        )
    return Extent(start, length, zero=False, dirty=bool(flags & p.STATE_DIRTY))
