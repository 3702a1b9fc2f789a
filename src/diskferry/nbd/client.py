"""NbdClient: one NBD connection that many threads use at once, many requests in flight."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from diskferry.base.errors import CancelledError
from diskferry.nbd import protocol as p
from diskferry.nbd.coverage import ReadCoverage
from diskferry.nbd.errors import NbdConnectionError, NbdError
from diskferry.nbd.handshake import ExportInfo, negotiate
from diskferry.nbd.transport import Transport
from diskferry.nbd.url import NbdUrl, parse_url

DEFAULT_REQUEST_TIMEOUT = 300.0
_IN_FLIGHT = 16
_SPAN = 1 << 30
# nbdkit sends at most 1 Mi descriptors in a block status chunk, qemu 128 Ki
_MAX_STATUS_REPLY = p.STATUS_CONTEXT.size + (1 << 20) * p.STATUS_DESCRIPTOR.size
_MAX_ERROR_REPLY = p.ERROR_CHUNK.size + p.MAX_ERROR_MESSAGE + p.CHUNK_OFFSET.size
_CLOSE_WAIT = 5.0
_WATCH_TICK = 0.1
_ZEROS = memoryview(bytes(1 << 20))

Descriptors = list[tuple[int, int]]
Failure = NbdError | CancelledError


class _Request:
    """One request in flight: sent, or about to be, and waiting for its reply."""

    __slots__ = (
        "buf",
        "command",
        "coverage",
        "deadline",
        "done",
        "error",
        "length",
        "offset",
        "status",
    )

    def __init__(self, command: int, offset: int, length: int, buf: memoryview | None) -> None:
        self.command = command
        self.offset = offset
        self.length = length
        self.buf = buf
        self.coverage = ReadCoverage(length) if buf is not None else None
        self.deadline = 0.0
        self.done = threading.Event()
        self.error: Failure | None = None
        self.status: dict[int, Descriptors] = {}


class NbdClient:
    """A connection to one NBD export; every method may be called from many threads at once.

    A sender lock keeps requests whole on the wire; a receiver thread reads replies and
    completes each request by its cookie. At most `max_in_flight` requests wait at a time.
    Only the receiver completes requests, so that no buffer goes back to its caller while
    a reply may still be written into it: whatever breaks the connection (a failed send,
    a request past its deadline, `cancel` set) shuts the socket down, and the receiver,
    woken, fails every request still waiting.
    """

    def __init__(
        self,
        url: NbdUrl,
        transport: Transport,
        info: ExportInfo,
        max_in_flight: int = _IN_FLIGHT,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        cancel: threading.Event | None = None,
    ) -> None:
        self.url = url
        self.info = info
        self._transport = transport
        self._reader = transport.reader()
        block = info.min_block
        self._payload = min(info.max_block, p.DEFAULT_MAX_PAYLOAD) // block * block
        self._request_timeout = request_timeout
        self._cancel = cancel
        self._send_lock = threading.Lock()
        self._state = threading.Lock()
        self._rmw_lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._cookies = itertools.count(1)
        self._pending: dict[int, _Request] = {}
        self._broken: Failure | None = None
        self._closing = False
        self._received_all = threading.Event()
        self._receiver = threading.Thread(target=self._receive_loop, name=f"nbd-receiver {url}")
        self._receiver.daemon = True
        self._watchdog = threading.Thread(target=self._watch, name=f"nbd-watchdog {url}")
        self._watchdog.daemon = True
        self._receiver.start()
        self._watchdog.start()

    @classmethod
    def connect(
        cls,
        url: str | NbdUrl,
        *,
        contexts: Sequence[str] = (),
        max_in_flight: int = _IN_FLIGHT,
        timeout: float = 30.0,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        cancel: threading.Event | None = None,
    ) -> NbdClient:
        """Connect to `url` and negotiate structured replies and the meta `contexts` given.

        `timeout` bounds the handshake, `request_timeout` each request; once `cancel` is
        set every waiting request raises CancelledError and the connection is closed down.
        """
        target = parse_url(url) if isinstance(url, str) else url
        if cancel is not None and cancel.is_set():
            raise CancelledError(f"connecting to NBD server {target} was cancelled")
        transport, info = negotiate(target, contexts, timeout)
        return cls(
            target, transport, info, max_in_flight, request_timeout=request_timeout, cancel=cancel
        )

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

    def read_many(self, pieces: Sequence[tuple[int, memoryview | bytearray]]) -> None:
        """Fill each `(offset, buf)` of `pieces`: the requests of all of them are sent before
        any reply is waited for, so one caller keeps many in flight. A piece that is not
        whole minimum blocks is read widened to them and copied out."""
        aligned: list[tuple[int, memoryview]] = []
        widened: list[tuple[memoryview, memoryview]] = []
        for offset, buf in pieces:
            view = memoryview(buf).cast("B")
            start, stop = self._aligned(offset, len(view))
            if (start, stop) == (offset, offset + len(view)):
                aligned.append((offset, view))
            elif view:
                wide = memoryview(bytearray(stop - start))
                aligned.append((start, wide))
                widened.append((view, wide[offset - start : offset - start + len(view)]))
        self._wait_all(self._reads(aligned))
        for view, part in widened:
            view[:] = part

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
            healthy = self._broken is None and not self._cancelled()
        if healthy:
            disc = p.REQUEST.pack(p.REQUEST_MAGIC, 0, p.CMD_DISC, next(self._cookies), 0, 0)
            with contextlib.suppress(OSError), self._send_lock:
                self._transport.sendall(disc)
            self._receiver.join(_CLOSE_WAIT)
        self._transport.shutdown()
        self._receiver.join()
        self._watchdog.join()
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
        self._wait_all(self._reads([(offset, view)]))

    def _reads(self, aligned: Iterable[tuple[int, memoryview]]) -> Iterator[_Request]:
        """Read requests filling each whole-block `(offset, view)`, submitted as they are taken."""
        for offset, view in aligned:
            for at, n in self._pieces(len(view), self._payload):
                yield self._submit(p.CMD_READ, 0, offset + at, n, buf=view[at : at + n])

    def _write_aligned(self, offset: int, view: memoryview, flags: int) -> None:
        self._wait_all(
            self._submit(p.CMD_WRITE, flags, offset + at, n, payload=view[at : at + n])
            for at, n in self._pieces(len(view), self._payload)
        )

    def _ranged(self, command: int, flags: int, start: int, stop: int) -> None:
        """A payload-less command over [start, stop), split into spans a 32-bit length holds."""
        self._wait_all(
            self._submit(command, flags, start + at, n)
            for at, n in self._pieces(stop - start, _SPAN)
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
            refusal = self._refusal()
            if refusal is None:
                cookie = next(self._cookies)
                request.deadline = time.monotonic() + self._request_timeout
                self._pending[cookie] = request
        if refusal is not None:
            self._slots.release()
            raise refusal
        header = p.REQUEST.pack(p.REQUEST_MAGIC, flags, command, cookie, offset, length)
        try:
            with self._send_lock:
                self._transport.sendall(header)
                if payload is not None:
                    self._transport.sendall(payload)
        except OSError as e:
            self._break(NbdConnectionError(f"sending to NBD server {self.url} failed: {e}"))
        return request

    def _refusal(self) -> Failure | None:
        """Why no request can be sent now (the caller holds the state lock), if it cannot."""
        if self._cancelled():
            return CancelledError(f"requests to NBD server {self.url} were cancelled")
        if self._broken is not None:
            return _fresh(self._broken)
        if self._closing:
            return NbdConnectionError(f"the connection to NBD server {self.url} is closed")
        return None

    def _cancelled(self) -> bool:
        return self._cancel is not None and self._cancel.is_set()

    def _wait_all(self, requests: Iterable[_Request]) -> None:
        """Send `requests` (submitted as they are taken), wait for every one sent, then raise
        the first error: even when a later one cannot be sent, no buffer goes back to the
        caller while an earlier request may still fill it."""
        sent: list[_Request] = []
        try:
            for request in requests:
                sent.append(request)
        finally:
            for request in sent:
                request.done.wait()
        for request in sent:
            if request.error is not None:
                raise _fresh(request.error)

    def _break(self, error: Failure) -> None:
        """Fail the connection with `error`; the receiver, woken, fails the waiting requests."""
        with self._state:
            if self._broken is None:
                self._broken = error
        self._transport.shutdown()

    def _watch(self) -> None:
        """Break the connection once `cancel` is set or a request outlives its deadline."""
        while not self._received_all.wait(_WATCH_TICK):
            if self._cancelled():
                self._break(CancelledError(f"requests to NBD server {self.url} were cancelled"))
                return
            now = time.monotonic()
            with self._state:
                late = [r for r in self._pending.values() if r.deadline <= now]
            if late:
                self._break(
                    NbdConnectionError(
                        f"NBD {_command(late[0])} on {self.url} got no answer in "
                        f"{self._request_timeout:g} s: the server hangs or is overloaded"
                    )
                )
                return

    def _finish(self, cookie: int) -> None:
        with self._state:
            request = self._pending.pop(cookie)
        self._slots.release()
        request.done.set()

    def _receive_loop(self) -> None:
        """Read replies until the connection ends, then fail every request still waiting."""
        try:
            while True:
                self._receive_one()
        except NbdConnectionError as e:
            error = e
        except Exception as e:
            error = NbdConnectionError(f"the connection to NBD server {self.url} broke: {e}")
        self._break(error)
        with self._state:
            waiting = list(self._pending.values())
            self._pending.clear()
            broken = self._broken
        for request in waiting:
            request.error = broken
            self._slots.release()
            request.done.set()
        self._received_all.set()

    def _receive_one(self) -> None:
        (magic,) = p.MAGIC.unpack(self._read(p.MAGIC.size))
        if magic == p.SIMPLE_REPLY_MAGIC:
            self._simple_reply()
        elif magic == p.STRUCTURED_REPLY_MAGIC:
            self._reply_chunk()
        else:
            raise self._violation(f"unknown reply magic {magic:#x}")

    def _simple_reply(self) -> None:
        error, cookie = p.SIMPLE_REPLY_REST.unpack(self._read(p.SIMPLE_REPLY_REST.size))
        request = self._request(cookie)
        if error:
            request.error = self._server_error(request, error, "")
        elif request.buf is not None:
            self._read_into(request.buf)
        self._finish(cookie)

    def _reply_chunk(self) -> None:
        """One chunk of a structured reply; its lengths are checked before anything is read."""
        flags, rtype, cookie, length = p.STRUCTURED_REPLY_REST.unpack(
            self._read(p.STRUCTURED_REPLY_REST.size)
        )
        request = self._request(cookie)
        if rtype == p.REPLY_TYPE_OFFSET_DATA and length > p.CHUNK_OFFSET.size:
            (offset,) = p.CHUNK_OFFSET.unpack(self._read(p.CHUNK_OFFSET.size))
            self._read_into(self._fill(request, offset, length - p.CHUNK_OFFSET.size))
        elif rtype == p.REPLY_TYPE_OFFSET_HOLE and length == p.HOLE_CHUNK.size:
            offset, size = p.HOLE_CHUNK.unpack(self._read(p.HOLE_CHUNK.size))
            hole = self._fill(request, offset, size)
            for at in range(0, size, len(_ZEROS)):
                piece = hole[at : at + len(_ZEROS)]
                piece[:] = _ZEROS[: len(piece)]
        elif rtype == p.REPLY_TYPE_BLOCK_STATUS:
            self._status_chunk(request, length)
        elif rtype & p.REPLY_TYPE_ERROR_BIT:
            self._error_chunk(request, length)
        elif rtype != p.REPLY_TYPE_NONE or length:
            raise self._violation(f"reply chunk of type {rtype} and length {length}")
        if flags & p.REPLY_FLAG_DONE:
            coverage = request.coverage
            if request.error is None and coverage is not None and not coverage.whole:
                raise self._violation(
                    f"the reply to the {_command(request)} ended after {coverage.filled} bytes"
                )
            self._finish(cookie)

    def _status_chunk(self, request: _Request, length: int) -> None:
        if request.command != p.CMD_BLOCK_STATUS:
            raise self._violation("block status where none was asked")
        descriptors = length - p.STATUS_CONTEXT.size
        if (
            descriptors < p.STATUS_DESCRIPTOR.size
            or descriptors % p.STATUS_DESCRIPTOR.size
            or length > _MAX_STATUS_REPLY
        ):
            raise self._violation(f"block status chunk of length {length}")
        data = self._read(length)
        (context,) = p.STATUS_CONTEXT.unpack_from(data)
        request.status[context] = list(
            p.STATUS_DESCRIPTOR.iter_unpack(memoryview(data)[p.STATUS_CONTEXT.size :])
        )

    def _error_chunk(self, request: _Request, length: int) -> None:
        if not p.ERROR_CHUNK.size <= length <= _MAX_ERROR_REPLY:
            raise self._violation(f"error chunk of length {length}")
        data = self._read(length)
        error, size = p.ERROR_CHUNK.unpack_from(data)
        message = data[p.ERROR_CHUNK.size : p.ERROR_CHUNK.size + size]
        text = " ".join(message.decode("utf-8", "replace").split())
        if request.error is None:
            request.error = self._server_error(request, error, text)

    def _request(self, cookie: int) -> _Request:
        with self._state:
            request = self._pending.get(cookie)
        if request is None:
            raise self._violation(f"a reply to no request (cookie {cookie})")
        return request

    def _fill(self, request: _Request, offset: int, size: int) -> memoryview:
        """The part of a read's buffer that a data or hole chunk fills: new, inside the request."""
        if request.buf is None or request.coverage is None:
            raise self._violation(f"read data in the reply to the {_command(request)}")
        at = offset - request.offset
        wrong = request.coverage.add(at, size)
        if wrong is not None:
            raise self._violation(f"{wrong}, in the reply to the {_command(request)}")
        return request.buf[at : at + size]

    def _server_error(self, request: _Request, code: int, text: str) -> NbdError:
        name = p.errno_name(code)
        message = f"NBD {_command(request)} on {self.url} failed: {name}"
        message += f" ({text})" if text else ""
        return NbdError(message, errno_name=name)

    def _violation(self, what: str) -> NbdConnectionError:
        return NbdConnectionError(f"NBD server {self.url} broke the protocol: {what}")

    def _read(self, n: int) -> bytearray:
        buf = bytearray(n)
        self._read_into(memoryview(buf))
        return buf

    def _read_into(self, view: memoryview) -> None:
        if self._reader.read_into(view) == len(view):
            return
        if self._closing:
            raise NbdConnectionError(f"the connection to NBD server {self.url} was closed")
        raise NbdConnectionError(
            f"the connection to NBD server {self.url} was lost: "
            "check that the server is still running"
        )


def _fresh(error: Failure) -> Failure:
    """A new exception like `error`, so that each waiter raises its own."""
    if isinstance(error, NbdError):
        return type(error)(str(error), errno_name=error.errno_name)
    return CancelledError(str(error))


def _command(request: _Request) -> str:
    """What a request asked, as in "read of 4096 bytes at offset 0"."""
    what = p.COMMAND_NAMES.get(request.command, f"command {request.command}")
    return f"{what} of {request.length} bytes at offset {request.offset}"
