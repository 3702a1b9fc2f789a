"""NbdClient: one NBD connection that many threads use at once, many requests in flight."""

from __future__ import annotations

import contextlib
import itertools
import struct
import threading
from collections.abc import Callable, Iterator, Sequence

from diskferry.nbd import protocol as p
from diskferry.nbd.errors import NbdConnectionError, NbdError
from diskferry.nbd.handshake import ExportInfo, negotiate
from diskferry.nbd.transport import Transport
from diskferry.nbd.url import NbdUrl, parse_url

_IN_FLIGHT = 16
_SPAN = 1 << 30
_MAX_STATUS_REPLY = 64 << 20
_CLOSE_WAIT = 5.0

Descriptors = list[tuple[int, int]]


class _Request:
    """One request waiting for its reply."""

    __slots__ = ("buf", "command", "done", "error", "length", "offset", "status")

    def __init__(self, command: int, offset: int, length: int, buf: memoryview | None) -> None:
        self.command = command
        self.offset = offset
        self.length = length
        self.buf = buf
        self.done = threading.Event()
        self.error: NbdError | None = None
        self.status: dict[int, Descriptors] = {}


class NbdClient:
    """A connection to one NBD export; every method may be called from many threads at once.

    A sender lock keeps requests whole on the wire; a receiver thread reads replies and
    completes each request by its cookie. At most `max_in_flight` requests wait at a time.
    """

    def __init__(
        self, url: NbdUrl, transport: Transport, info: ExportInfo, max_in_flight: int = _IN_FLIGHT
    ) -> None:
        self.url = url
        self.info = info
        self._transport = transport
        self._reader = transport.reader()
        self._payload = min(info.max_block, p.DEFAULT_MAX_PAYLOAD)
        self._send_lock = threading.Lock()
        self._state = threading.Lock()
        self._rmw_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._cookies = itertools.count(1)
        self._pending: dict[int, _Request] = {}
        self._broken: NbdConnectionError | None = None
        self._closing = False
        self._receiver = threading.Thread(target=self._receive_loop, name="nbd-receiver")
        self._receiver.daemon = True
        self._receiver.start()

    @classmethod
    def connect(
        cls,
        url: str | NbdUrl,
        *,
        contexts: Sequence[str] = (),
        max_in_flight: int = _IN_FLIGHT,
        timeout: float = 30.0,
    ) -> NbdClient:
        """Connect to `url` and negotiate structured replies and the meta `contexts` given."""
        target = parse_url(url) if isinstance(url, str) else url
        transport, info = negotiate(target, contexts, timeout)
        return cls(target, transport, info, max_in_flight)

    @property
    def size(self) -> int:
        """The export's size in bytes."""
        return self.info.size

    @property
    def readonly(self) -> bool:
        """Whether the server refuses writes (NBD_FLAG_READ_ONLY)."""
        return bool(self.info.flags & p.TFLAG_READ_ONLY)

    @property
    def can_flush(self) -> bool:
        """Whether the server takes NBD_CMD_FLUSH."""
        return bool(self.info.flags & p.TFLAG_SEND_FLUSH)

    @property
    def can_trim(self) -> bool:
        """Whether the server takes NBD_CMD_TRIM."""
        return bool(self.info.flags & p.TFLAG_SEND_TRIM)

    @property
    def can_zero(self) -> bool:
        """Whether the server takes NBD_CMD_WRITE_ZEROES."""
        return bool(self.info.flags & p.TFLAG_SEND_WRITE_ZEROES)

    @property
    def can_fast_zero(self) -> bool:
        """Whether the server takes NBD_CMD_FLAG_FAST_ZERO."""
        return bool(self.info.flags & p.TFLAG_SEND_FAST_ZERO)

    @property
    def contexts(self) -> list[str]:
        """The meta contexts the server granted, in the order of their ids."""
        return [self.info.contexts[i] for i in sorted(self.info.contexts)]

    def read(self, offset: int, length: int) -> bytes:
        """The `length` bytes at `offset`."""
        buf = bytearray(length)
        self.read_into(offset, buf)
        return bytes(buf)

    def read_into(self, offset: int, buf: memoryview | bytearray) -> None:
        """Fill `buf` with the bytes at `offset`, in requests the server's block sizes allow."""
        self._by_blocks(offset, memoryview(buf).cast("B"), self._read_aligned, self._read_edge)

    def write(
        self, offset: int, data: bytes | bytearray | memoryview, *, fua: bool = False
    ) -> None:
        """Write `data` at `offset`; with `fua` the server persists it before answering."""
        self._check_writable()
        flags = p.CMD_FLAG_FUA if fua and self.info.flags & p.TFLAG_SEND_FUA else 0
        self._by_blocks(
            offset,
            memoryview(data).cast("B"),
            lambda at, view: self._write_aligned(at, view, flags),
            lambda at, view: self._write_edge(at, view, flags),
        )

    def write_zeroes(
        self, offset: int, length: int, *, no_hole: bool = False, fast: bool = False
    ) -> None:
        """Make a range read as zeros (NBD_CMD_WRITE_ZEROES); holes allowed unless `no_hole`.

        With `fast`, the server fails with ENOTSUP rather than zero slowly.
        """
        self._check_writable()
        if not self.can_zero or (fast and not self.can_fast_zero):
            what = "fast write-zeroes" if fast else "write-zeroes"
            raise NbdError(f"NBD server {self.url} does not support {what}", errno_name="ENOTSUP")
        flags = (p.CMD_FLAG_NO_HOLE if no_hole else 0) | (p.CMD_FLAG_FAST_ZERO if fast else 0)
        inner_start, inner_stop = self._inner(offset, length)
        if inner_start >= inner_stop:
            self.write(offset, bytes(length))
            return
        if inner_start > offset:
            self.write(offset, bytes(inner_start - offset))
        self._ranged(p.CMD_WRITE_ZEROES, flags, inner_start, inner_stop)
        if inner_stop < offset + length:
            self.write(inner_stop, bytes(offset + length - inner_stop))

    def trim(self, offset: int, length: int) -> None:
        """Tell the server a range is no longer needed (NBD_CMD_TRIM, whole blocks only)."""
        self._check_writable()
        if not self.can_trim:
            raise NbdError(f"NBD server {self.url} does not support trim", errno_name="ENOTSUP")
        inner_start, inner_stop = self._inner(offset, length)
        if inner_start < inner_stop:
            self._ranged(p.CMD_TRIM, 0, inner_start, inner_stop)

    def flush(self) -> None:
        """Make what was written durable (NBD_CMD_FLUSH when the server takes it)."""
        if self.can_flush:
            self._wait_all([self._submit(p.CMD_FLUSH, 0, 0, 0)])

    def block_status(self, offset: int, length: int) -> dict[str, Descriptors]:
        """Per negotiated context, (length, flags) descriptors from `offset` on.

        `offset` must be a multiple of the minimum block size. The server may answer for
        a prefix of the range only (and may run past it in its last descriptor).
        """
        if not self.info.contexts:
            raise NbdError(
                f"NBD server {self.url} granted no meta context for block status",
                errno_name="ENOTSUP",
            )
        _, stop = self._aligned(offset, min(length, _SPAN))
        if offset < self.size:
            stop = min(stop, self.size)
        request = self._submit(p.CMD_BLOCK_STATUS, 0, offset, stop - offset)
        self._wait_all([request])
        return {
            self.info.contexts[cid]: descriptors
            for cid, descriptors in request.status.items()
            if cid in self.info.contexts
        }

    def close(self) -> None:
        """Disconnect (NBD_CMD_DISC) and release the connection."""
        with self._state:
            if self._closing:
                return
            self._closing = True
            healthy = self._broken is None
        if healthy:
            disc = p.REQUEST.pack(p.REQUEST_MAGIC, 0, p.CMD_DISC, next(self._cookies), 0, 0)
            with contextlib.suppress(OSError), self._send_lock:
                self._transport.sendall(disc)
            self._receiver.join(_CLOSE_WAIT)
        self._transport.shutdown()
        self._receiver.join()
        self._reader.close()
        self._transport.close()

    def __enter__(self) -> NbdClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_writable(self) -> None:
        if self.readonly:
            raise NbdError(f"NBD export {self.url} is read-only", errno_name="EPERM")

    def _by_blocks(
        self,
        offset: int,
        view: memoryview,
        whole: Callable[[int, memoryview], None],
        edge: Callable[[int, memoryview], None],
    ) -> None:
        """Run `whole` on the whole minimum blocks of a range and `edge` on the parts around."""
        if not view:
            return
        start, stop = self._inner(offset, len(view))
        if start >= stop:
            edge(offset, view)
            return
        if start > offset:
            edge(offset, view[: start - offset])
        whole(start, view[start - offset : stop - offset])
        if stop < offset + len(view):
            edge(stop, view[stop - offset :])

    def _read_edge(self, offset: int, view: memoryview) -> None:
        """Read the blocks around a short unaligned range and copy out its bytes."""
        start, stop = self._aligned(offset, len(view))
        wide = memoryview(bytearray(stop - start))
        self._read_aligned(start, wide)
        view[:] = wide[offset - start : offset - start + len(view)]

    def _write_edge(self, offset: int, view: memoryview, flags: int) -> None:
        """Read the blocks around a short unaligned range, patch them, write them back."""
        start, stop = self._aligned(offset, len(view))
        wide = memoryview(bytearray(stop - start))
        # Serialised among themselves: two patches of one block must not lose each other.
        with self._rmw_lock:
            self._read_aligned(start, wide)
            wide[offset - start : offset - start + len(view)] = view
            self._write_aligned(start, wide, flags)

    def _aligned(self, offset: int, length: int) -> tuple[int, int]:
        """The range widened to whole minimum blocks."""
        block = self.info.min_block
        return offset - offset % block, -(-(offset + length) // block) * block

    def _inner(self, offset: int, length: int) -> tuple[int, int]:
        """The whole minimum blocks inside the range."""
        block = self.info.min_block
        return -(-offset // block) * block, (offset + length) // block * block

    def _pieces(self, length: int, step: int) -> Iterator[tuple[int, int]]:
        for start in range(0, length, step):
            yield start, min(step, length - start)

    def _read_aligned(self, offset: int, view: memoryview) -> None:
        self._wait_all(
            [
                self._submit(p.CMD_READ, 0, offset + at, n, buf=view[at : at + n])
                for at, n in self._pieces(len(view), self._payload)
            ]
        )

    def _write_aligned(self, offset: int, view: memoryview, flags: int) -> None:
        self._wait_all(
            [
                self._submit(p.CMD_WRITE, flags, offset + at, n, payload=view[at : at + n])
                for at, n in self._pieces(len(view), self._payload)
            ]
        )

    def _ranged(self, command: int, flags: int, start: int, stop: int) -> None:
        """A payload-less command over [start, stop), split into spans a 32-bit length holds."""
        self._wait_all(
            [
                self._submit(command, flags, start + at, n)
                for at, n in self._pieces(stop - start, _SPAN)
            ]
        )

    def _submit(
        self,
        command: int,
        flags: int,
        offset: int,
        length: int,
        *,
        buf: memoryview | None = None,
        payload: memoryview | None = None,
    ) -> _Request:
        request = _Request(command, offset, length, buf)
        self._slots.acquire()
        with self._state:
            if self._broken is not None or self._closing:
                self._slots.release()
                raise NbdConnectionError(
                    str(self._broken or f"the connection to NBD server {self.url} is closed")
                )
            cookie = next(self._cookies)
            self._pending[cookie] = request
        header = p.REQUEST.pack(p.REQUEST_MAGIC, flags, command, cookie, offset, length)
        try:
            with self._send_lock:
                self._transport.sendall(header)
                if payload is not None:
                    self._transport.sendall(payload)
        except OSError as e:
            self._fail(f"sending to NBD server {self.url} failed: {e}")
        return request

    def _wait_all(self, requests: list[_Request]) -> None:
        """Wait for every request (the buffers are the caller's), then raise the first error."""
        for request in requests:
            request.done.wait()
        for request in requests:
            if request.error is not None:
                error = request.error
                raise type(error)(str(error), errno_name=error.errno_name)

    def _finish(self, cookie: int) -> None:
        with self._state:
            request = self._pending.pop(cookie, None)
        if request is None:
            return
        self._slots.release()
        request.done.set()

    def _fail(self, message: str) -> None:
        """Break the connection: every waiting request fails with NbdConnectionError."""
        with self._state:
            if self._broken is None:
                self._broken = NbdConnectionError(message)
            waiting = list(self._pending.values())
            self._pending.clear()
        for request in waiting:
            request.error = self._broken
            self._slots.release()
            request.done.set()
        self._transport.shutdown()

    def _receive_loop(self) -> None:
        try:
            while True:
                self._receive_one()
        except NbdConnectionError as e:
            message = str(e)
        except Exception as e:
            message = f"the connection to NBD server {self.url} broke: {e}"
        self._fail(message)

    def _receive_one(self) -> None:
        (magic,) = p.MAGIC.unpack(self._read(4))
        if magic == p.SIMPLE_REPLY_MAGIC:
            error, cookie = p.SIMPLE_REPLY_REST.unpack(self._read(p.SIMPLE_REPLY_REST.size))
            request = self._request(cookie)
            if error:
                request.error = self._server_error(request, error, "")
            elif request.command == p.CMD_READ and request.buf is not None:
                self._read_into(request.buf)
            self._finish(cookie)
            return
        if magic != p.STRUCTURED_REPLY_MAGIC:
            raise self._violation(f"unknown reply magic {magic:#x}")
        flags, rtype, cookie, length = p.STRUCTURED_REPLY_REST.unpack(
            self._read(p.STRUCTURED_REPLY_REST.size)
        )
        request = self._request(cookie)
        if rtype == p.REPLY_TYPE_OFFSET_DATA and length >= 8:
            (offset,) = struct.unpack(">Q", self._read(8))
            self._read_into(self._slice(request, offset, length - 8))
        elif rtype == p.REPLY_TYPE_OFFSET_HOLE and length == 12:
            offset, size = struct.unpack(">QI", self._read(12))
            self._slice(request, offset, size)[:] = bytes(size)
        elif rtype == p.REPLY_TYPE_BLOCK_STATUS and length >= 12 and (length - 4) % 8 == 0:
            if request.command != p.CMD_BLOCK_STATUS or length > _MAX_STATUS_REPLY:
                raise self._violation("block status where none was asked")
            data = self._read(length)
            (context,) = struct.unpack_from(">I", data)
            request.status[context] = list(struct.iter_unpack(">II", data[4:]))
        elif rtype & p.REPLY_TYPE_ERROR_BIT and 6 <= length <= _MAX_STATUS_REPLY:
            data = self._read(length)
            error, size = struct.unpack_from(">IH", data)
            text = " ".join(data[6 : 6 + size].decode("utf-8", "replace").split())
            if request.error is None:
                request.error = self._server_error(request, error, text)
        elif rtype != p.REPLY_TYPE_NONE or length:
            raise self._violation(f"reply chunk of type {rtype} and length {length}")
        if flags & p.REPLY_FLAG_DONE:
            self._finish(cookie)

    def _request(self, cookie: int) -> _Request:
        with self._state:
            request = self._pending.get(cookie)
        if request is None:
            raise self._violation(f"a reply to no request (cookie {cookie})")
        return request

    def _slice(self, request: _Request, offset: int, size: int) -> memoryview:
        """The part of a read request's buffer that a data or hole chunk fills."""
        at = offset - request.offset
        if request.buf is None or at < 0 or at + size > request.length:
            raise self._violation("read data outside the requested range")
        return request.buf[at : at + size]

    def _server_error(self, request: _Request, code: int, text: str) -> NbdError:
        name = p.errno_name(code)
        what = p.COMMAND_NAMES.get(request.command, f"command {request.command}")
        message = (
            f"NBD {what} of {request.length} bytes at offset {request.offset} on {self.url} "
            f"failed: {name}" + (f" ({text})" if text else "")
        )
        return NbdError(message, errno_name=name)

    def _violation(self, what: str) -> NbdConnectionError:
        return NbdConnectionError(f"NBD server {self.url} broke the protocol: {what}")

    def _read(self, n: int) -> bytes:
        buf = bytearray(n)
        self._read_into(memoryview(buf))
        return bytes(buf)

    def _read_into(self, view: memoryview) -> None:
        done = 0
        while done < len(view):
            got = self._reader.readinto(view[done:])
            if not got:
                if self._closing:
                    raise NbdConnectionError(f"the connection to NBD server {self.url} was closed")
                raise NbdConnectionError(
                    f"the connection to NBD server {self.url} was lost: "
                    "check that the server is still running"
                )
            done += got
