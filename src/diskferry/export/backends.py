"""The export proxy's connections to the export servers, under one bound: a pool of TLS
connections over TCP, and a pool of plain HTTP connections per Unix socket of a server on
this host (no TLS to decrypt on that hop). Each pool is kept and reused; a Unix socket's pool
is closed once no route names the socket and no request uses it. A Unix socket is used only
while its peer runs as the proxy's own user: another user's gets no request, and no token.

A request takes one of its server's `per_backend` slots, and only then one of the pool's
`limit`: a server that never answers holds no more than its own share, and requests to it that
find its share taken wait for it no longer than `queue` seconds, holding nothing meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.connector import Connection

from diskferry.export.errors import (
    BackendBusyError,
    BusyError,
    ProxyBusyError,
    UntrustedBackendError,
)
from diskferry.serving.unix_socket import peer_uid


@dataclass
class PoolSettings:
    """The shared client pool: sizes and timeouts in seconds (no total timeout on a body);
    `queue` is how long a request may wait for a slot."""

    limit: int = 100
    per_backend: int = 20
    idle: float = 30.0
    connect: float = 10.0
    headers: float = 30.0
    queue: float = 60.0

    def share(self, processes: int) -> PoolSettings:
        """What one of `processes` processes may hold so that together they keep the bounds."""
        return dataclasses.replace(
            self,
            limit=math.ceil(self.limit / processes),
            per_backend=math.ceil(self.per_backend / processes),
        )


class OwnUserUnixConnector(aiohttp.UnixConnector):
    """A Unix socket's pool whose every connection is checked to reach this user's server."""

    async def connect(
        self, req: aiohttp.ClientRequest, traces: list[Any], timeout: aiohttp.ClientTimeout
    ) -> Connection:
        """A connection from the pool, or a new one; UntrustedBackendError (the connection
        closed) where another user serves the socket."""
        conn = await super().connect(req, traces, timeout)
        sock = conn.transport.get_extra_info("socket") if conn.transport is not None else None
        uid = peer_uid(sock) if sock is not None else None
        if uid != os.geteuid():
            conn.close()
            raise UntrustedBackendError(
                f"{self.path} is served by uid {uid}, not by this user (uid {os.geteuid()})"
            )
        return conn


class Backends:
    """At most `limit` requests at once to all servers, `per_backend` to each; `read_bufsize`
    is what each response may buffer ahead of its reader."""

    def __init__(self, pool: PoolSettings, read_bufsize: int) -> None:
        self.pool = pool
        self.read_bufsize = read_bufsize
        # `connect` bounds a wait for a pooled connection, which the slots leave for none but
        # a server that two routes name differently
        self.timeout = aiohttp.ClientTimeout(
            total=None, connect=pool.queue, sock_connect=pool.connect, sock_read=pool.headers
        )
        # an upload is answered once the server has taken all of it in: no read timeout
        self.upload_timeout = aiohttp.ClientTimeout(
            total=None, connect=pool.queue, sock_connect=pool.connect, sock_read=None
        )
        self._slots = asyncio.Semaphore(pool.limit)
        self._backend_slots: dict[str, asyncio.Semaphore] = {}
        self._asking: Counter[str] = Counter()
        self._tcp: aiohttp.ClientSession | None = None
        self._unix: dict[str, aiohttp.ClientSession] = {}
        self._using: Counter[str] = Counter()

    def _session(self, connector: aiohttp.BaseConnector) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=connector,
            timeout=self.timeout,
            auto_decompress=False,
            read_bufsize=self.read_bufsize,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
        )

    async def open(self) -> None:
        """Make the TCP pool (within the running event loop)."""
        self._tcp = self._session(
            aiohttp.TCPConnector(
                limit=self.pool.limit,
                limit_per_host=self.pool.per_backend,
                keepalive_timeout=self.pool.idle,
            )
        )

    async def close(self) -> None:
        """Close every pool."""
        sessions = [*self._unix.values(), *([self._tcp] if self._tcp is not None else [])]
        self._unix.clear()
        self._tcp = None
        for session in sessions:
            await session.close()

    @contextlib.asynccontextmanager
    async def slot(self, backend: str) -> AsyncIterator[None]:
        """A slot of the server `backend` (its Unix socket or URL), then one of the pool, held
        while the block runs; BackendBusyError or ProxyBusyError when either is not free
        within `queue` seconds in all."""
        deadline = asyncio.get_running_loop().time() + self.pool.queue
        own = self._backend_slots.setdefault(backend, asyncio.Semaphore(self.pool.per_backend))
        self._asking[backend] += 1
        try:
            busy = BackendBusyError("every connection to its server is in use")
            await _acquire(own, deadline, busy)
            try:
                full = ProxyBusyError("every connection of the proxy is in use")
                await _acquire(self._slots, deadline, full)
                try:
                    yield
                finally:
                    self._slots.release()
            finally:
                own.release()
        finally:
            self._asking[backend] -= 1
            if not self._asking[backend]:
                del self._asking[backend], self._backend_slots[backend]

    @contextlib.asynccontextmanager
    async def session(
        self, unix_socket: str | None, named: Callable[[], set[str]]
    ) -> AsyncIterator[aiohttp.ClientSession]:
        """The pool for one request (taken within its `slot`), held for as long as the block
        runs: the Unix socket's when one is given, else the TCP pool; `named` tells which
        sockets routes still name."""
        if unix_socket is None:
            assert self._tcp is not None, "open() first"
            yield self._tcp
            return
        self._using[unix_socket] += 1
        try:
            session = self._unix.get(unix_socket)
            if session is None:
                session = self._unix[unix_socket] = self._session(
                    OwnUserUnixConnector(
                        unix_socket,
                        limit=self.pool.per_backend,
                        keepalive_timeout=self.pool.idle,
                    )
                )
                await self._close_unnamed(named())
            yield session
        finally:
            self._using[unix_socket] -= 1
            if not self._using[unix_socket]:
                del self._using[unix_socket]

    async def _close_unnamed(self, named: set[str]) -> None:
        """Close the pools of sockets that no route names and no request uses."""
        for path in list(self._unix):
            # checked and taken out with no wait between, so no request gets a closing pool
            if path in self._unix and path not in named and path not in self._using:
                await self._unix.pop(path).close()


async def _acquire(slots: asyncio.Semaphore, deadline: float, busy: BusyError) -> None:
    """Take one of `slots` before the loop's time `deadline`, or raise `busy`."""
    try:
        async with asyncio.timeout_at(deadline):
            await slots.acquire()
    except TimeoutError:
        raise busy from None
