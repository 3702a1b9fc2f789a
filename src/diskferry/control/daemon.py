"""The daemon: its data directory, the object store, the HTTPS API, and what runs beside them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import threading
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from diskferry.base.errors import DiskferryError
from diskferry.control.apiserver.http import logs
from diskferry.control.apiserver.http.app import ApiServer
from diskferry.control.apiserver.http.connections import guarded
from diskferry.control.apiserver.http.limits import DEFAULT_LIMITS, Limits
from diskferry.control.apiserver.kubeconfig import write_kubeconfig
from diskferry.control.apiserver.objects import KEEP_CHANGES, ObjectService
from diskferry.control.apiserver.pki import ensure_pki, ensure_token
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.resources.registry import REGISTRY
from diskferry.serving.defaults import DEFAULT_ADDRESS, DEFAULT_PORT

log = logging.getLogger(__name__)
GRACE_SECONDS = 3
WILDCARDS = ("0.0.0.0", "", "::")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class DataDirError(DiskferryError):
    """The data directory cannot be made or written."""


class ListenError(DiskferryError):
    """The API's address and port cannot be listened on."""


class Background(Protocol):
    """Something that runs beside the API for the daemon's life, such as the controllers."""

    def start(self) -> None:
        """Start running; return at once."""

    def stop(self) -> None:
        """Stop running; return once stopped."""


@runtime_checkable
class LogSource(Protocol):
    """A background part that keeps the logs of the workers it ran for objects."""

    def log_text(self, info: KindInfo, obj: dict[str, Any]) -> str | None:
        """The captured log of `obj`'s worker, None when no worker has run for it."""


BackgroundFactory = Callable[["Daemon"], Background]


def prepare_data_dir(path: Path) -> Path:
    """`path` made (mode 0700) and checked writable; DataDirError in one line otherwise."""
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.chmod(0o700)  # one made before, or under another umask, is closed too
        probe = path / ".writable"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise DataDirError(
            f"data directory {path} is not writable: {error.strerror or error}"
        ) from None
    return path.resolve()


@contextlib.contextmanager
def _stopping_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """While the block runs in the main thread, SIGTERM and SIGINT call `stop`; in another
    thread, which cannot take signals, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: stop()) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class Daemon:
    """The store, the API on HTTPS with a bearer token, and the background parts, in one process."""

    def __init__(
        self,
        data_dir: Path,
        *,
        address: str = DEFAULT_ADDRESS,
        port: int = DEFAULT_PORT,
        registry: Registry = REGISTRY,
        background: Sequence[BackgroundFactory] = (),
        limits: Limits = DEFAULT_LIMITS,
        keep_changes: int = KEEP_CHANGES,
    ) -> None:
        self.data_dir = prepare_data_dir(data_dir)
        self.address = address
        self.port = port
        self.limits = limits
        listening = [] if address in WILDCARDS else [address]
        self.pki = ensure_pki(self.data_dir / "pki", listening)
        self.token = ensure_token(self.data_dir / "token")
        self.service = ObjectService(
            self.data_dir / "state.db", registry, keep_changes=keep_changes
        )
        self.kubeconfig_path = self.data_dir / "kubeconfig"
        self._factories = list(background)
        self._background: list[Background] = []
        self._server: uvicorn.Server | None = None
        self._stopping = False
        self.api: ApiServer | None = None

    def url(self, port: int) -> str:
        """The API's URL as clients reach it."""
        host = "127.0.0.1" if self.address in WILDCARDS else self.address
        host = f"[{host}]" if ":" in host else host
        return f"https://{host}:{port}"

    def _socket(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.address, self.port))
        except OSError as error:
            sock.close()
            raise ListenError(
                f"cannot listen on {self.address}:{self.port}: {error.strerror or error}"
            ) from None
        return sock

    def stop(self) -> None:
        """Stop serving: open watches end, the server closes, `run` returns."""
        self._stopping = True
        if self.api is not None:
            self.api.stop()
        if self._server is not None:
            self._server.should_exit = True

    def _log_text(self, info: KindInfo, obj: dict[str, Any]) -> str | None:
        """The first log any background part keeps for `obj`."""
        for part in self._background:
            if isinstance(part, LogSource) and (text := part.log_text(info, obj)) is not None:
                return text
        return None

    def _answers(self, url: str) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        try:
            with urllib.request.urlopen(f"{url}/healthz", context=context, timeout=2) as reply:
                return reply.status == 200
        except OSError:
            return False

    async def _publish(self, url: str) -> None:
        """Write the kubeconfig once the API answers over HTTPS with its certificate."""
        while not await asyncio.to_thread(self._answers, url):
            await asyncio.sleep(0.1)
        write_kubeconfig(self.kubeconfig_path, url, self.pki.ca_cert.read_bytes(), self.token)
        log.info("serving on %s; kubeconfig in %s", url, self.kubeconfig_path)

    async def _serve(self, sock: socket.socket) -> None:
        port = sock.getsockname()[1]
        url = self.url(port)
        self.api = ApiServer(
            self.service, self.service.registry, self.token, f"127.0.0.1:{port}", self.limits
        )
        logs.install(self.api, self._log_text)
        config = uvicorn.Config(
            self.api.app,
            http=guarded(H11Protocol, self.api.connections),
            ws="none",  # the API serves no websockets: every connection stays in the guard
            limit_concurrency=self.limits.connections,
            ssl_certfile=str(self.pki.server_cert),
            ssl_keyfile=str(self.pki.server_key),
            log_config=None,
            access_log=False,
            proxy_headers=False,  # a client's address is its own, not what X-Forwarded-For says
            timeout_graceful_shutdown=GRACE_SECONDS,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._server.should_exit = self._stopping
        publish = asyncio.create_task(self._publish(url))
        try:
            await self._server.serve(sockets=[sock])
        finally:
            publish.cancel()

    def run(self) -> None:
        """Serve until `stop` (or SIGTERM or SIGINT, run in the main thread), the background
        parts running beside."""
        sock = self._socket()
        try:
            for factory in self._factories:
                part = factory(self)
                part.start()
                self._background.append(part)
            # uvicorn's server takes no signal in a thread other than the main one: the API is
            # served from a thread of its own, and SIGTERM and SIGINT come to this one
            with (
                _stopping_on_signals(self.stop),
                ThreadPoolExecutor(1, thread_name_prefix="diskferry-api") as api,
            ):
                api.submit(asyncio.run, self._serve(sock)).result()
        finally:
            for part in reversed(self._background):
                part.stop()
            if self.api is not None:
                self.api.close()
            self.service.close()
            sock.close()
            log.info("stopped")
