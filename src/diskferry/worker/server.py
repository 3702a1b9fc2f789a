"""The status server of a worker: GET /progress and GET /metrics, aiohttp on a thread of its own."""

from __future__ import annotations

import asyncio
import threading

from aiohttp import web

from diskferry.base.errors import DiskferryError
from diskferry.worker.metrics import metrics_text
from diskferry.worker.status import JobStatus

_START_SECONDS = 30.0
_METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class StatusServerError(DiskferryError):
    """The status server could not listen where the job asked."""

    reason = "StatusServerFailed"


class StatusServer:
    """Serves one job's status on an event loop in a daemon thread, so the job's own code
    (threads, or an event loop of its own) never waits for it."""

    def __init__(self, status: JobStatus) -> None:
        self.status = status
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="status-server", daemon=True
        )
        self._runner: web.AppRunner | None = None

    def start(self, address: str, port: int) -> int:
        """Listen on address:port (0 picks a port); the port."""
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start(address, port), self._loop)
        try:
            return future.result(_START_SECONDS)
        except OSError as e:
            self.stop()
            raise StatusServerError(
                f"cannot serve the job's status on {address}:{port}: {e.strerror or e}"
            ) from e

    async def _start(self, address: str, port: int) -> int:
        app = web.Application()
        app.router.add_get("/progress", self._progress)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, address, port).start()
        return self._runner.addresses[0][1]

    async def _progress(self, request: web.Request) -> web.Response:
        return web.json_response(self.status.to_json())

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=metrics_text(self.status).encode(), headers={"Content-Type": _METRICS_TYPE}
        )

    def stop(self) -> None:
        """Stop listening and end the thread."""
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(
                _START_SECONDS
            )
            self._runner = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_START_SECONDS)
        self._loop.close()
