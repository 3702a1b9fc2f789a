"""Serving an aiohttp app over TLS, with a request-header deadline and an idle keep-alive limit;
and, for peers on the same host, the same app in plain HTTP on a Unix socket.

aiohttp has no timeout for request headers of its own: a client that sends them a byte at a
time would hold its connection forever. Each connection here must finish its TLS handshake, and
then deliver each request's headers, within `header_timeout` seconds (counted from the
handshake, and for later requests on a keep-alive connection from their first byte).

Each connection is aiohttp's own protocol wrapped in a `_Connection` that sees every byte
first. Between requests it reads the next request's head up to the blank line that ends it,
checking it as it comes (see `request_head`): a head that fails is answered and logged in one
fixed line and the connection closed, and aiohttp never sees it. A middleware tells the
connection when the app starts and finishes a request, so that nothing of a request in
progress, its body above all, is ever counted or checked. Where neither sees a request (one
that aiohttp refuses before the app), aiohttp's idle keep-alive limit still closes the
connection, and its log of the refusal is cut to one line without the request's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from diskferry.serving.accesslog import AccessLogger, note_route_shape
from diskferry.serving.errors import ServeError
from diskferry.serving.request_head import BadHead, RequestHead
from diskferry.serving.tcp_socket import BACKLOG, bind_tcp
from diskferry.serving.tls import ServerTls
from diskferry.serving.unix_socket import UnixSocket, bind_unix

TLS_REFRESH_SECONDS = 1.0
_AppHandler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Timeouts:
    """Server-side limits in seconds; a flowing body has no total limit."""

    header: float = 10.0
    idle: float = 60.0


class _Connections:
    """The connections that completed their TLS handshake and are not closed yet."""

    def __init__(self) -> None:
        self._open: set[_Connection] = set()
        self._none_open = asyncio.Event()
        self._none_open.set()

    def add(self, connection: _Connection) -> None:
        self._open.add(connection)
        self._none_open.clear()

    def discard(self, connection: _Connection) -> None:
        self._open.discard(connection)
        if not self._open:
            self._none_open.set()

    async def all_closed(self, timeout: float) -> None:
        """Wait until none is open, or `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._none_open.wait()


class _ShortParseErrors(logging.Filter):
    """aiohttp's record of a request it could not parse, which holds the request's bytes (a
    token in a header among them), made one line that names only the peer and the fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "-"
            record.msg = '%s "-" %s bad request refused: aiohttp cannot parse it (%s)'
            record.args = (peer, error.code, type(error).__name__)
            record.exc_info = None
            record.exc_text = None
        return True


_SHORT_PARSE_ERRORS = _ShortParseErrors()


def _peer(transport: asyncio.BaseTransport) -> str:
    """The peer's address as the access log names it."""
    name = transport.get_extra_info("peername")
    return str(name[0]) if isinstance(name, tuple) else "unix"


class _Connection(asyncio.Protocol):
    """aiohttp's protocol of one connection, closed when a request's head comes too late, and
    answered and closed when it fails its check."""

    def __init__(
        self,
        inner: asyncio.Protocol,
        header_timeout: float,
        connections: _Connections,
        log: logging.Logger,
    ) -> None:
        self._inner = inner
        self._header_timeout = header_timeout
        self._connections = connections
        self._log = log
        self._transport: asyncio.BaseTransport | None = None
        self._awaiting_headers = True
        self._head = RequestHead()
        self._refused = False
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._connections.add(self)
        self._inner.connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._awaiting_headers:
            if self._deadline is None:
                self._arm()
            try:
                ended = self._head.feed(data)
            except BadHead as bad:
                self._refuse(bad)
                return
            if ended:
                self.request_started()
        self._inner.data_received(data)

    def _refuse(self, bad: BadHead) -> None:
        """Answer a head that failed its check, log it in one line, and close."""
        self._refused = True
        self._disarm()
        # uvloop's TLS transport writes without being an asyncio.WriteTransport
        transport = cast(asyncio.WriteTransport, self._transport)
        peer = _peer(transport)
        self._log.warning('%s "-" %d bad request refused: %s', peer, bad.status, bad.why)
        transport.write(bad.answer())
        transport.close()

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._inner.connection_lost(exc)
        self._connections.discard(self)

    def request_started(self) -> None:
        """The headers of a request are in: stop counting until it is finished."""
        self._awaiting_headers = False
        self._disarm()

    def request_finished(self) -> None:
        """The app is done with a request: the next byte starts the next request's deadline."""
        self._awaiting_headers = True
        self._head = RequestHead()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        self._deadline = loop.call_later(self._header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self._transport is not None:
            self._transport.close()


@web.middleware
async def _mark_requests(request: web.Request, handler: _AppHandler) -> web.StreamResponse:
    """Tells the request's connection when the app starts and finishes it."""
    connection = request.transport.get_protocol() if request.transport is not None else None
    if not isinstance(connection, _Connection):
        return await handler(request)
    connection.request_started()
    try:
        return await handler(request)
    finally:
        connection.request_finished()


class HttpsListener:
    """An app served on one TLS socket (and a Unix socket when asked); stop() lets requests in
    flight finish up to a grace."""

    def __init__(
        self,
        app: web.Application,
        tls: ServerTls,
        timeouts: Timeouts,
        access_log_class: type[AccessLogger] = AccessLogger,
    ) -> None:
        self.app = app
        self.tls = tls
        self.timeouts = timeouts
        self.access_log_class = access_log_class
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._unix_server: asyncio.Server | None = None
        self._unix_socket: UnixSocket | None = None
        self._connections = _Connections()
        self._grace = 0.0

    async def start(
        self, host: str, port: int, grace: float = 60.0, sock: socket.socket | None = None
    ) -> int:
        """Listen on host:port (0 picks a free port), or accept on `sock` when given (bound and
        listening already), and return the port.

        Puts the middlewares that time request headers and note the route for the access log
        first among the app's middlewares.
        """
        listening = sock if sock is not None else bind_tcp(host, port)
        self.app.middlewares[:0] = [_mark_requests, note_route_shape]
        server_log = logging.getLogger("aiohttp.server")
        if _SHORT_PARSE_ERRORS not in server_log.filters:
            server_log.addFilter(_SHORT_PARSE_ERRORS)
        self._runner = web.AppRunner(
            self.app,
            handle_signals=False,
            shutdown_timeout=grace,
            keepalive_timeout=self.timeouts.idle,
            access_log_class=self.access_log_class,
            access_log=logging.getLogger(self.access_log_class.logger_name),
        )
        await self._runner.setup()

        def factory() -> _Connection:
            self.tls.refresh()
            return self._connection()

        self._grace = grace
        try:
            self._server = await asyncio.get_running_loop().create_server(
                factory,
                sock=listening,
                ssl=self.tls.context,
                ssl_handshake_timeout=self.timeouts.header,
                backlog=BACKLOG,
            )
        except OSError as e:
            listening.close()
            await self._runner.cleanup()
            raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
        self.port = self._server.sockets[0].getsockname()[1]
        self._refresher = asyncio.create_task(self._refresh_tls())
        return self.port

    async def _refresh_tls(self) -> None:
        """Look at the certificate and settings files every few seconds, besides at each new
        connection: each process of a server that has several sees every good version of them,
        so none keeps an older one where a later file does not load."""
        while True:
            await asyncio.sleep(TLS_REFRESH_SECONDS)
            self.tls.refresh()

    async def listen_unix(self, path: str) -> None:
        """Serve the app started on TLS also in plain HTTP on a Unix socket at `path` (owner-only,
        a stale one replaced), removed again by stop()."""
        self._unix_socket = bind_unix(path)
        try:
            self._unix_server = await asyncio.get_running_loop().create_unix_server(
                self._connection, sock=self._unix_socket.sock
            )
        except OSError as e:
            self._unix_socket.sock.close()
            self._unix_socket.remove()
            raise ServeError(f"cannot listen on {path}: {e.strerror or e}") from e

    def _connection(self) -> _Connection:
        """A new connection's protocol: aiohttp's, under the header deadline."""
        assert self._runner is not None and self._runner.server is not None, "start() first"
        return _Connection(
            self._runner.server(),
            self.timeouts.header,
            self._connections,
            logging.getLogger(self.access_log_class.logger_name),
        )

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish (up to the grace), close the rest.

        Returns once every connection has flushed what it buffered and closed (or the grace
        ran out), so the last bytes of a response are not lost when the process exits.
        """
        if self._refresher is not None:
            self._refresher.cancel()
        if self._server is not None:
            self._server.close()
        if self._unix_server is not None:
            self._unix_server.close()
        if self._unix_socket is not None:
            self._unix_socket.remove()
        if self._runner is not None:
            await self._runner.cleanup()
        await self._connections.all_closed(self._grace)
