"""The embedded host's export proxy (`host.proxy`): one proxy worker on the documented port,
its routes file rewritten (atomically) as exports come and go, restarted when it ends, its
certificate renewed at half its life. The export servers run on this host, so each also
listens on a Unix socket in the runtime directory and the proxy reaches it there in plain HTTP,
with no TLS on that hop; a server that names no socket is reached over TLS.

The proxy runs while there is a route: it starts with the first export and stops (its
downloads given their grace) once the last one goes. Its routes live in its job's directory,
so a daemon started again reads them back and a restarted proxy gets them all.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import yaml
from pydantic import ValidationError

from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.keeping import Keeper
from diskferry.control.host.proxy import Outside
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.export import ProxyJob
from diskferry.export.routes import Route, RoutesDocument
from diskferry.qemu.storage_daemon import runtime_dir
from diskferry.serving.defaults import PROXY_PORT
from diskferry.serving.unix_socket import SOCKET_PATH_MAX

log = logging.getLogger("diskferry.control")
PROXY_ADDRESS = "127.0.0.1"
PROXY_JOB = "export-proxy"
ROUTES_FILE = "routes.yaml"
SOCKETS_DIR = "exports"
ENSURE_SECONDS = 5.0
PROXY_GRACE = 10.0


def routes_text(routes: dict[tuple[str, str], Route]) -> bytes:
    """The routes file's YAML."""
    document = RoutesDocument(exports=[routes[key] for key in sorted(routes)])
    return yaml.safe_dump(document.model_dump(by_alias=True, exclude_none=True)).encode()


class ProxyKeeper(Keeper):
    """Keeps the export proxy running on `address`:`port` through `runner`, with the routes
    the export reconciler gives it; `start` begins keeping it, `stop` ends that (the worker
    stays, as every worker does when the daemon stops)."""

    def __init__(
        self,
        runner: Runner,
        certs: ServerCerts,
        *,
        address: str = PROXY_ADDRESS,
        port: int = PROXY_PORT,
        interval: float = ENSURE_SECONDS,
    ) -> None:
        self.runner = runner
        self.certs = certs
        self.address = address
        self.port = port
        super().__init__("export proxy", interval)
        self._lock = threading.RLock()
        self._routes: dict[tuple[str, str], Route] | None = None

    @property
    def base_url(self) -> str:
        """The proxy's URL."""
        return f"https://{self.address}:{self.port}"

    def external_url(self, namespace: str, name: str) -> str:
        """The base URL of an export through the proxy, as KubeVirt's API paths have it."""
        return self.outside().export_url(namespace, name)

    def outside(self) -> Outside:
        """The proxy's URL, verified with the CA of the daemon's servers."""
        return Outside(self.base_url, self.certs.ca_pem().decode())

    def serving(self) -> bool:
        """Whether the proxy runs and listens."""
        state = self.runner.state(PROXY_JOB)
        details = ((state.progress or {}).get("details") or {}) if state else {}
        return bool(state and state.running and details.get("listenPort"))

    def finds(self, namespace: str, name: str) -> tuple[str, ...] | None:
        """None: the routes file names every server the proxy reaches."""
        return None

    def _loaded(self) -> dict[tuple[str, str], Route]:
        if self._routes is None:
            text = self.runner.read_file(PROXY_JOB, ROUTES_FILE)
            try:
                document = RoutesDocument.model_validate(yaml.safe_load(text or b"") or {})
            except (yaml.YAMLError, ValidationError) as e:
                log.warning(
                    "export proxy: its routes are unreadable, each export adds its own again: %s",
                    str(e).splitlines()[0],
                )
                document = RoutesDocument()
            self._routes = {(r.namespace, r.name): r for r in document.exports}
        return self._routes

    def routes(self) -> dict[tuple[str, str], Route]:
        """The routes the proxy serves."""
        with self._lock:
            return dict(self._loaded())

    def ensure(self) -> None:
        """While there is a route: the proxy started, or started again if it ended, and its
        certificate renewed when due; without one, the proxy stopped."""
        with self._lock:
            routes = self._loaded()
            state = self.runner.state(PROXY_JOB)
            if not routes:
                if state is not None and self.runner.forget(PROXY_JOB):
                    self._routes = None
                return
            if state is not None and not state.running:
                log.warning("the export proxy ended (exit code %s)", state.exit_code)
                for line in self.runner.log_tail(PROXY_JOB):
                    log.info("export proxy: %s", line)
                self.runner.purge(PROXY_JOB, keep_scratch=False)
                state = None
            if state is None:
                if routes:
                    self._start(routes)
                return
            self.certs.renew(self.runner, PROXY_JOB, [self.address])

    def _start(self, routes: dict[tuple[str, str], Route]) -> None:
        job = ProxyJob(
            routes=ROUTES_FILE,
            cert_dir=".",
            sans=[self.address],
            listen_address=self.address,
            listen_port=self.port,
            grace=PROXY_GRACE,
        )
        files = [*self.certs.job_files([self.address]), JobFile(ROUTES_FILE, routes_text(routes))]
        self.runner.start(PROXY_JOB, job, files)

    def route(
        self, namespace: str, name: str, port: int, ready: bool, unix_socket: str | None = None
    ) -> None:
        """Route `namespace/name` to the server on 127.0.0.1:`port`, verified with the CA file
        given to the proxy, or over `unix_socket` when the server listens on one (replacing its
        previous route)."""
        route = Route(
            namespace=namespace,
            name=name,
            url=f"https://127.0.0.1:{port}",
            caFile=self.certs.ca_file,
            ready=ready,
            unixSocket=unix_socket,
        )
        with self._lock:
            routes = self._loaded()
            if routes.get((route.namespace, route.name)) == route:
                return
            routes[(route.namespace, route.name)] = route
            self._write(routes)

    def drop_route(self, namespace: str, name: str) -> None:
        """Stop routing the export."""
        with self._lock:
            routes = self._loaded()
            if routes.pop((namespace, name), None) is not None:
                self._write(routes)

    def _write(self, routes: dict[tuple[str, str], Route]) -> None:
        if self.runner.state(PROXY_JOB) is not None:
            self.runner.write_file(PROXY_JOB, ROUTES_FILE, routes_text(routes))
        if not routes or self.runner.state(PROXY_JOB) is None:
            self.ensure()

    def server_socket(self, job_id: str) -> str | None:
        """Where the server of the job `job_id` is to listen for the proxy: a socket in the
        exports folder of this user's runtime directory (each checked private: RuntimeDirError
        otherwise); None where that path is too long for a socket."""
        return export_socket(job_id)

    def drop_server_socket(self, job_id: str) -> None:
        """Remove the socket a killed server of `job_id` left (a stopped one removes its own)."""
        path = export_socket(job_id)
        if path is not None:
            Path(path).unlink(missing_ok=True)


def export_socket(job_id: str) -> str | None:
    """Where the server `job_id` listens for the proxy (see `ProxyKeeper.server_socket`)."""
    path = str(runtime_dir(SOCKETS_DIR) / f"{job_id}.sock")
    return path if len(os.fsencode(path)) <= SOCKET_PATH_MAX else None
