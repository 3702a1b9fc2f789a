"""Running a server until a signal or its TTL: listen, announce the port, drain, stop."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import uvloop
from aiohttp import web

from diskferry.export.listener import HttpsListener, Timeouts
from diskferry.export.tls import ServerTls

_WORKERS = 32


@dataclass
class ServeOptions:
    """Where to listen, how long to live, and the server-side limits."""

    host: str = "0.0.0.0"
    port: int = 8443
    ttl: float | None = None
    grace: float = 60.0
    timeouts: Timeouts = field(default_factory=Timeouts)


async def _serve(
    app: web.Application,
    tls: ServerTls,
    opts: ServeOptions,
    on_listening: Callable[[int], None],
    on_stop: Callable[[], Awaitable[None]] | None,
) -> None:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(_WORKERS, thread_name_prefix="diskferry-io"))
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    listener = HttpsListener(app, tls, opts.timeouts)
    await listener.start(opts.host, opts.port, grace=opts.grace)
    try:
        on_listening(listener.port)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(opts.ttl):
                await stop.wait()
        if on_stop is not None:
            await on_stop()
    finally:
        await listener.stop()


def run(
    app: web.Application,
    tls: ServerTls,
    opts: ServeOptions,
    on_listening: Callable[[int], None],
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Serve `app` on uvloop until SIGTERM/SIGINT or the TTL, then `on_stop()` and close."""
    try:
        uvloop.run(_serve(app, tls, opts, on_listening, on_stop))
    finally:
        tls.close()
