"""Open connections, bounded per client address, each closed when it is slow to send a
request's headers: what uvicorn's options do not bound.

uvicorn bounds connections in all (`limit_concurrency`: a request beyond is answered 503) and
closes one idle after an answer (`timeout_keep_alive`), but a connection that sends nothing,
or its headers a line every few seconds, or the rest of a body it was answered before reading,
is kept as long as it lasts. Here uvicorn's protocol runs inside one that counts connections
by address (one beyond the bound is closed at once) and closes any connection that has no
request in the app `header_seconds` after it opened or its last request was answered, as
nginx's client_header_timeout and Go's ReadHeaderTimeout do. The app tells when a request
starts and ends (ConnectionActivity), naming its connection by the client's address and port.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from diskferry.control.apiserver.http.limits import Limits

Peer = tuple[str, int]


class _Waiting:
    """One connection's clock: closed unless a request starts within `seconds`."""

    def __init__(self, transport: asyncio.BaseTransport, seconds: float) -> None:
        self.transport = transport
        self.seconds = seconds
        self.timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Wait for a request's headers from now on."""
        self.stop()
        self.timer = asyncio.get_running_loop().call_later(self.seconds, self.transport.close)

    def stop(self) -> None:
        """A request started, or the connection went: stop waiting."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Connections:
    """The open connections: how many each address has, and each one's clock."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.by_address: Counter[str] = Counter()
        self.waiting: dict[Peer, _Waiting] = {}

    def open(self, peer: Peer, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection from `peer` and start its clock; False (nothing counted)
        when its address has as many open as it may."""
        if self.by_address[peer[0]] >= self.limits.connections_per_client:
            return False
        self.by_address[peer[0]] += 1
        self.waiting[peer] = _Waiting(transport, self.limits.header_seconds)
        self.waiting[peer].start()
        return True

    def close(self, peer: Peer) -> None:
        """A connection counted by `open` went."""
        self.waiting.pop(peer).stop()
        self.by_address[peer[0]] -= 1
        if not self.by_address[peer[0]]:
            del self.by_address[peer[0]]

    def busy(self, peer: Peer) -> None:
        """A request of `peer`'s connection reached the app: its headers came in time."""
        if peer in self.waiting:
            self.waiting[peer].stop()

    def idle(self, peer: Peer) -> None:
        """A request of `peer`'s connection was answered: the next one's headers are due."""
        if peer in self.waiting:
            self.waiting[peer].start()


def peer_of(transport: asyncio.BaseTransport) -> Peer:
    """A connection's client address and port, as uvicorn names it in a request's scope."""
    info = transport.get_extra_info("peername")
    return (str(info[0]), int(info[1]))


def guarded(inner: type[asyncio.Protocol], connections: Connections) -> type[asyncio.Protocol]:
    """A protocol class for uvicorn's `http` option: `inner` (uvicorn's own) behind the bound
    per address and the header clock of `connections`."""

    class Guarded(asyncio.Protocol):
        """One connection: refused beyond its address's bound, else served by `inner`."""

        def __init__(self, **options: Any) -> None:
            self.inner = inner(**options)
            self.peer: Peer | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            """Count the connection and hand it to `inner`, or close it beyond the bound."""
            peer = peer_of(transport)
            if not connections.open(peer, transport):
                transport.close()
                return
            self.peer = peer
            self.inner.connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            """Let the connection go."""
            if self.peer is not None:
                connections.close(self.peer)
                self.inner.connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            """Bytes for `inner`."""
            if self.peer is not None:
                self.inner.data_received(data)

        def eof_received(self) -> bool | None:
            """The client closed its side: as `inner` says."""
            return self.inner.eof_received() if self.peer is not None else None

        def pause_writing(self) -> None:
            """The client reads slower than `inner` writes."""
            self.inner.pause_writing()

        def resume_writing(self) -> None:
            """The client caught up."""
            self.inner.resume_writing()

    return Guarded


class ConnectionActivity:
    """ASGI middleware: tells `connections` when a request starts and when it was answered."""

    def __init__(self, app: ASGIApp, connections: Connections) -> None:
        self.app = app
        self.connections = connections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, its connection's header clock stopped meanwhile."""
        client = scope.get("client")
        peer = (str(client[0]), int(client[1])) if client else None
        if peer is not None:
            self.connections.busy(peer)
        try:
            await self.app(scope, receive, send)
        finally:
            if peer is not None:
                self.connections.idle(peer)
