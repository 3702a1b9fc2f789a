"""Serving an aiohttp app over TLS, with a request-header deadline and an idle keep-alive limit.

aiohttp has no timeout for request headers of its own: a client that sends them a byte at a
time would hold its connection forever. Each connection here must finish its TLS handshake, and
then deliver each request's headers, within `header_timeout` seconds (counted from the
handshake, and for later requests on a keep-alive connection from their first byte).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from dataclasses import dataclass

from aiohttp import web

from diskferry.export.accesslog import RedactingAccessLogger
from diskferry.export.errors import ExportError
from diskferry.export.tls import ServerTls

access_log = logging.getLogger("diskferry.export.access")


@dataclass
class Timeouts:
    """Server-side limits in seconds; a flowing body has no total limit."""

    header: float = 10.0
    idle: float = 60.0


class _Connections:
    """The connections that completed their TLS handshake and are not closed yet."""

    def __init__(self) -> None:
        self._open: set[web.RequestHandler] = set()
        self._none_open = asyncio.Event()
        self._none_open.set()

    def add(self, handler: web.RequestHandler) -> None:
        self._open.add(handler)
        self._none_open.clear()

    def discard(self, handler: web.RequestHandler) -> None:
        self._open.discard(handler)
        if not self._open:
            self._none_open.set()

    async def all_closed(self, timeout: float) -> None:
        """Wait until none is open, or `timeout` seconds."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._none_open.wait()


class _Handler(web.RequestHandler):
    """A request handler that closes a connection whose headers do not arrive in time."""

    def __init__(
        self,
        manager: web.Server,
        *,
        header_timeout: float,
        tracker: _Connections,
        **kwargs: object,
    ) -> None:
        super().__init__(manager, **kwargs)  # type: ignore[arg-type]
        self._header_timeout = header_timeout
        self._header_deadline: asyncio.TimerHandle | None = None
        self._tracker = tracker

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._tracker.add(self)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._header_deadline is None and not self._request_in_progress and not self._messages:
            self._arm()
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._disarm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        super().connection_lost(exc)
        self._tracker.discard(self)

    def _arm(self) -> None:
        self._header_deadline = self._loop.call_later(self._header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _expired(self) -> None:
        self._header_deadline = None
        if not self._request_in_progress and not self._messages:
            self.force_close()


class HttpsListener:
    """An app served on one TLS socket; stop() lets requests in flight finish up to a grace."""

    def __init__(self, app: web.Application, tls: ServerTls, timeouts: Timeouts) -> None:
        self.app = app
        self.tls = tls
        self.timeouts = timeouts
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._server: asyncio.base_events.Server | None = None
        self._connections = _Connections()
        self._grace = 0.0

    async def start(self, host: str, port: int, grace: float = 60.0) -> int:
        """Listen on host:port (0 picks a free port) and return the port."""
        self._runner = web.AppRunner(self.app, handle_signals=False, shutdown_timeout=grace)
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        manager = self._runner.server
        assert manager is not None

        def factory() -> _Handler:
            self.tls.refresh()
            return _Handler(
                manager,
                loop=loop,
                header_timeout=self.timeouts.header,
                tracker=self._connections,
                keepalive_timeout=self.timeouts.idle,
                access_log_class=RedactingAccessLogger,
                access_log=access_log,
            )

        self._grace = grace

        try:
            self._server = await loop.create_server(
                factory,
                host,
                port,
                ssl=self.tls.context,
                ssl_handshake_timeout=self.timeouts.header,
                backlog=1024,
                reuse_address=True,
                family=socket.AF_INET6 if ":" in host else socket.AF_INET,
            )
        except OSError as e:
            await self._runner.cleanup()
            raise ExportError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Stop accepting, let requests in flight finish (up to the grace), close the rest.

        Returns once every connection has flushed what it buffered and closed (or the grace
        ran out), so the last bytes of a response are not lost when the process exits.
        """
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await self._runner.cleanup()
        await self._connections.all_closed(self._grace)
