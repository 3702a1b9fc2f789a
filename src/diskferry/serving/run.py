"""Running a server until its stop event or its TTL: listen, announce the port, drain, stop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import uvloop
from aiohttp import web

from diskferry.serving.accesslog import AccessLogger
from diskferry.serving.defaults import DEFAULT_ADDRESS, EXPORT_PORT
from diskferry.serving.listener import HttpsListener, Timeouts
from diskferry.serving.tls import ServerTls

_WORKERS = 32
# how often the loop looks at the stop event, which signal handlers and other threads set
_STOP_POLL_SECONDS = 0.1


@dataclass
class ServeOptions:
    """Where to listen (TLS on host:port, or on `sock` bound already, and plain HTTP on
    `unix_socket` for peers on this host when given), how long to live, and the server-side
    limits."""

    host: str = DEFAULT_ADDRESS
    port: int = EXPORT_PORT
    sock: socket.socket | None = None
    unix_socket: str | None = None
    ttl: float | None = None
    grace: float = 60.0
    timeouts: Timeouts = field(default_factory=Timeouts)
    access_log_class: type[AccessLogger] = AccessLogger


async def _stopped(stop: threading.Event, ttl: float | None) -> bool:
    """Wait for `stop` or the TTL; whether `stop` came first."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(ttl):
            while not stop.is_set():
                await asyncio.sleep(_STOP_POLL_SECONDS)
    return stop.is_set()


async def _serve(
    app: web.Application,
    tls: ServerTls,
    opts: ServeOptions,
    stop: threading.Event,
    on_listening: Callable[[int], None],
    on_stop: Callable[[bool], Awaitable[None]] | None,
) -> bool:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(_WORKERS, thread_name_prefix="diskferry-io"))
    listener = HttpsListener(app, tls, opts.timeouts, opts.access_log_class)
    await listener.start(opts.host, opts.port, grace=opts.grace, sock=opts.sock)
    try:
        if opts.unix_socket is not None:
            await listener.listen_unix(opts.unix_socket)
        on_listening(listener.port)
        expired = not await _stopped(stop, opts.ttl)
        if on_stop is not None:
            await on_stop(expired)
    finally:
        await listener.stop()
    return expired


def run(
    app: web.Application,
    tls: ServerTls,
    opts: ServeOptions,
    stop: threading.Event,
    on_listening: Callable[[int], None],
    on_stop: Callable[[bool], Awaitable[None]] | None = None,
) -> bool:
    """Serve `app` on uvloop until `stop` is set or the TTL, then `on_stop(expired)` and close;
    whether the TTL ended it."""
    try:
        return uvloop.run(_serve(app, tls, opts, stop, on_listening, on_stop))
    finally:
        tls.close()
