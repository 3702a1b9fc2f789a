"""The operator's probes over plain HTTP on a port of its own: GET /healthz (alive) and /readyz
(ready), each 200 "ok" or 503 saying why not, served by uvicorn in a thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from diskferry.serving.tcp_socket import bind_tcp

log = logging.getLogger("diskferry.kube")
STOP_SECONDS = 5
Check = Callable[[], str | None]
"""A probe's check: None when all is well, else why not."""


def _app(alive: Check, ready: Check) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    def answer(check: Check) -> PlainTextResponse:
        why = check()
        return PlainTextResponse(
            "ok" if why is None else why, status_code=200 if why is None else 503
        )

    app.add_api_route("/healthz", lambda: answer(alive), methods=["GET"])
    app.add_api_route("/readyz", lambda: answer(ready), methods=["GET"])
    return app


class Health:
    """Answers the probes on `address:port` while started."""

    def __init__(self, address: str, port: int, alive: Check, ready: Check) -> None:
        self.address = address
        self.sock = bind_tcp(address, port)  # ServeError now, when the port is taken
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            _app(alive, ready), log_config=None, access_log=False, lifespan="off", ws="none"
        )
        # run in a thread of its own, uvicorn's server leaves the signals to the operator
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self.sock]}, name="health", daemon=True
        )

    def start(self) -> None:
        """Start answering; return at once."""
        self._thread.start()
        log.info("probes on http://%s:%d/healthz and /readyz", self.address, self.port)

    def stop(self) -> None:
        """Stop answering."""
        self._server.should_exit = True
        self._thread.join(STOP_SECONDS)
        self.sock.close()
