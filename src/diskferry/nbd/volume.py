"""NbdVolume: an NBD export as a Volume, with extents from base:allocation and dirty bitmaps."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence

from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent, merge_adjacent
from diskferry.disk.file_volume import FileVolume
from diskferry.disk.volume import ExtentContext, Volume
from diskferry.nbd import protocol as p
from diskferry.nbd.client import DEFAULT_REQUEST_TIMEOUT, NbdClient
from diskferry.nbd.errors import NbdConnectionError, NbdError
from diskferry.nbd.point_zeros import point_zeros

ALLOCATION = "base:allocation"
DIRTY_BITMAP = "qemu:dirty-bitmap:"
# depth 1: the export's own node holds the run, not a node under it
ALLOCATION_DEPTH = "qemu:allocation-depth"
_ZERO_WRITE_BLOCK = 1 << 20


class NbdVolume(Volume):
    """An NBD export; `extents("dirty")` needs the dirty bitmap named at open.

    With `data_file`, the export is a backup point's fleecing node over that raw volume,
    and its zeros are the point's (see `point_zeros`). With `quiescent` too, nothing
    writes the disk while the export lives, so the point's bytes and holes are the raw
    volume's: they are read from it, not over NBD, and only a dirty bitmap's status is
    asked of the server (its allocation status walks the overlay's metadata and the raw
    volume's holes both, 5 ms a GiB, for nothing).
    """

    def __init__(
        self,
        client: NbdClient,
        *,
        writable: bool,
        bitmap: str | None = None,
        data_file: Volume | None = None,
        quiescent: bool = False,
    ) -> None:
        self.client = client
        self.bitmap = bitmap
        self.readonly = not writable or client.readonly
        self.sparse = client.can_zero or client.can_trim
        self.data_file = data_file
        self.quiescent = quiescent and data_file is not None
        self._bytes_from = data_file if self.quiescent else None

    @classmethod
    def open(
        cls,
        url: str,
        *,
        writable: bool = False,
        bitmap: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        cancel: threading.Event | None = None,
        data_file: str | None = None,
        quiescent: bool = False,
    ) -> NbdVolume:
        """Connect to the export at `url`; `bitmap` names a qemu dirty bitmap it exports.

        `data_file` is the raw volume under a fleecing export, when this host can open it;
        `quiescent` says that nothing writes the disk while the export lives.
        A request unanswered for `request_timeout` seconds breaks the connection; once
        `cancel` is set, waiting reads and writes raise CancelledError.
        """
        raw = _raw_volume(data_file)
        quiescent = quiescent and raw is not None
        contexts = [] if quiescent else [ALLOCATION]
        contexts += [DIRTY_BITMAP + bitmap] if bitmap else []
        contexts += [ALLOCATION_DEPTH] if raw is not None and not quiescent else []
        try:
            client = NbdClient.connect(
                url, contexts=contexts, request_timeout=request_timeout, cancel=cancel
            )
        except BaseException:
            if raw is not None:
                raw.close()
            raise
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
            if raw is not None and not _serves_the_point(client, raw, quiescent):
                raw.close()
                raw = None
                if quiescent:  # connected without the allocation status it now needs
                    client.close()
                    return cls.open(
                        url,
                        writable=writable,
                        bitmap=bitmap,
                        request_timeout=request_timeout,
                        cancel=cancel,
                    )
        except BaseException:
            client.close()
            if raw is not None:
                raw.close()
            raise
        return cls(client, writable=writable, bitmap=bitmap, data_file=raw, quiescent=quiescent)

    def __repr__(self) -> str:
        return f"NbdVolume({str(self.client.url)!r})"

    @property
    def size(self) -> int:
        """The export's size in bytes."""
        return self.client.size

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` with the bytes at `offset`."""
        if self._bytes_from is not None:
            self._bytes_from.read_into(offset, buf)
            return
        self.client.read_into(offset, buf)

    def read_into_many(self, pieces: Sequence[tuple[int, memoryview]]) -> None:
        """Fill each `(offset, buf)` of `pieces`, all requests sent before any is waited for."""
        if self._bytes_from is not None:
            self._bytes_from.read_into_many(pieces)
            return
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
        """Zeros and holes from base:allocation (a backup point's from its raw volume), or
        dirty runs from the bitmap given at open."""
        end = self.size if length is None else min(self.size, offset + length)
        if context == "zero" and self.quiescent:
            assert self.data_file is not None
            yield from self.data_file.extents("zero", offset, end - offset)
            return
        if context == "zero" and self.data_file is not None:
            yield from merge_adjacent(point_zeros(self.data_file, self._own_runs, offset, end))
            return
        name = ALLOCATION if context == "zero" else DIRTY_BITMAP + (self.bitmap or "")
        if name not in self.client.contexts:
            yield from super().extents(context, offset, end - offset)
            return
        runs = self._walk(name, offset, end)
        yield from merge_adjacent(_extent(context, *run) for run in runs)

    def _own_runs(self, offset: int, length: int) -> Iterator[tuple[int, int]]:
        """The runs of [offset, offset+length) that the export's own node holds."""
        for start, run, depth in self._walk(ALLOCATION_DEPTH, offset, offset + length):
            if depth == 1:
                yield start, run

    def _walk(self, name: str, offset: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(start, length, flags) of `name` over [offset, end), from block status in pieces:
        the server answers for a prefix, so ask again from its end."""
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
                    yield start, stop - start, flags
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
        if self.data_file is not None:
            self.data_file.close()


def _raw_volume(path: str | None) -> FileVolume | None:
    """The raw volume at `path` under a backup point's export, read-only; None where there is
    none or it is not a regular file this host opens."""
    if path is None or not os.path.isfile(path):
        return None
    try:
        return FileVolume(path)
    except VolumeError:
        return None


def _serves_the_point(client: NbdClient, raw: FileVolume, quiescent: bool) -> bool:
    """Whether `raw` can say the point's zeros (and, quiescent, hold its bytes): it has the
    export's size, and a fleecing export granted its allocation depth."""
    return raw.size == client.size and (quiescent or ALLOCATION_DEPTH in client.contexts)


def _extent(context: ExtentContext, start: int, length: int, flags: int) -> Extent:
    if context == "zero":
        # Only STATE_ZERO says the range reads as zeros: a hole over a backing file need not.
        return Extent(
            start, length, zero=bool(flags & p.STATE_ZERO), hole=bool(flags & p.STATE_HOLE)
        )
    return Extent(start, length, zero=False, dirty=bool(flags & p.STATE_DIRTY))
