"""The export engine's entry functions: one export server, or the proxy, run until stopped.

The CLI (`export serve`, `proxy serve`) and the worker both run these: SIGTERM or SIGINT
sets `stop`, the TTL expires an export; either way the server drains and the result says
how it ended. The listening port and URLs are published as details once known.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

from diskferry.disk.progress import Progress
from diskferry.export.accesslog import RedactingAccessLogger
from diskferry.export.backends import PoolSettings
from diskferry.export.errors import ExportError
from diskferry.export.job import ExportJob, ExportPhase, ProxyJob, ServeResult
from diskferry.export.links import export_links, linked
from diskferry.export.manifests import Side, load_manifest
from diskferry.export.proxy import ExportProxy
from diskferry.export.proxy_processes import ProxyProcesses
from diskferry.export.routes import RoutesFile, RouteSource
from diskferry.export.server import ExportServer
from diskferry.export.service_routes import ServiceRoutes
from diskferry.export.token import TokenFile
from diskferry.export.volumes import ExportedVolume, open_exported
from diskferry.serving.certs import default_sans
from diskferry.serving.listening import Listening
from diskferry.serving.run import run
from diskferry.serving.tcp_socket import bind_tcp
from diskferry.serving.tls import ServerTls
from diskferry.worker.output import write_output
from diskferry.worker.reporter import QUIET, EventType, Reporter


def _read_pem(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from e


def write_json(path: str, obj: object) -> None:
    """Write `obj` as JSON to the output file `path`, replacing it whole (see
    `diskferry.worker.output`)."""
    write_output(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


class _Announcer:
    """Publishes where a server listens (its port, its Unix socket if any, and `links`, its other
    URLs), and remembers the port."""

    def __init__(
        self,
        what: str,
        job: Listening,
        progress: Progress,
        reporter: Reporter,
        links: dict[str, str] | None = None,
        unix_socket: str | None = None,
    ) -> None:
        self.what, self.job, self.progress, self.reporter = what, job, progress, reporter
        self.links = links or {}
        self.unix_socket = unix_socket
        self.port = 0

    def __call__(self, port: int) -> None:
        self.port = port
        address = self.job.bind_address
        url = f"https://{address}:{port}"
        where = url if self.unix_socket is None else f"{url} and {self.unix_socket}"
        facts = {**self.links, **({"unixSocket": self.unix_socket} if self.unix_socket else {})}
        self.progress.set_phase(ExportPhase.SERVING)
        self.reporter.details(listenAddress=address, listenPort=port, url=url, **facts)
        self.reporter.event(EventType.NORMAL, "Listening", f"{self.what} listening on {where}")


def serve_export(
    job: ExportJob, progress: Progress, stop: threading.Event, reporter: Reporter = QUIET
) -> ServeResult:
    """Serve the job's volumes over HTTPS (and on its Unix socket, when it names one) until
    `stop` or the TTL, then drain up to the grace."""
    progress.set_phase(ExportPhase.STARTING)
    token = TokenFile(job.token_file)
    manifest = load_manifest(job.manifest) if job.manifest is not None else None
    what = f"export {job.name}"
    volumes: list[ExportedVolume] = []
    server: ExportServer | None = None
    tls = ServerTls(job.cert_dir, job.sans or default_sans(), job.tls_settings)
    cut = False
    try:
        volumes += [
            open_exported(v.name, v.path, v.bitmap, v.data_file, v.quiescent) for v in job.volumes
        ]
        links: dict[str, str] = {}
        sides: dict[str, Side] = {}
        if job.links is not None:
            ca = tls.ca_pem()
            outside = _read_pem(job.links.external_ca) if job.links.external_ca else ca
            sides = {
                "internal": Side(job.links.internal_url, ca),
                "external": Side(job.links.external_url, outside),
            }
            if job.links.file is not None:
                found = export_links(
                    job.links.internal_url,
                    job.links.external_url,
                    ca,
                    outside,
                    linked(volumes),
                    manifest is not None,
                )
                write_json(job.links.file, found)
            links = {"internalUrl": job.links.internal_url, "externalUrl": job.links.external_url}
        server = ExportServer(
            job.name,
            volumes,
            token,
            manifest,
            job.idle_timeout,
            sides,
            activity=lambda served, in_flight: reporter.details(
                requestsServed=served, requestsInFlight=in_flight
            ),
        )
        announce = _Announcer(what, job, progress, reporter, links, job.unix_socket)

        async def drain(expired: bool) -> None:
            nonlocal cut
            progress.set_phase(ExportPhase.DRAINING)
            server.expire()
            if not await server.drained(job.grace):
                cut = True
                reporter.warn(
                    "TransfersCut",
                    f"{what}: transfers still running after the grace period are cut",
                )

        options = job.serve_options(job.ttl, job.grace, RedactingAccessLogger)
        expired = run(
            server.app(),
            tls,
            dataclasses.replace(options, unix_socket=job.unix_socket),
            stop,
            announce,
            drain,
        )
    finally:
        if server is not None:
            server.close()
        for v in volumes:
            v.close()
        tls.close()
    reporter.event(EventType.NORMAL, "Expired" if expired else "Stopped", f"{what} stopped")
    return ServeResult(
        name=job.name,
        ended="expired" if expired else "stopped",
        listen_port=announce.port,
        transfers_cut=cut,
    )


@dataclasses.dataclass
class ProxyShare:
    """One process's part of the proxy: its relay (the routes read, its share of the backend
    pool) and its TLS."""

    proxy: ExportProxy
    tls: ServerTls

    @classmethod
    def of(cls, job: ProxyJob) -> ProxyShare:
        """The share of one of the job's processes."""
        pool = PoolSettings(idle=job.backend_idle_timeout).share(job.processes)
        routes: RouteSource = (
            ServiceRoutes(job.services_ca, job.cluster_api)
            if job.services_ca
            else RoutesFile(job.routes or "")
        )
        proxy = ExportProxy(routes, pool)
        return cls(proxy, ServerTls(job.cert_dir, job.sans or default_sans(), job.tls_settings))

    def serve(
        self,
        job: ProxyJob,
        sock: socket.socket,
        stop: threading.Event,
        on_listening: Callable[[int], None],
        on_stop: Callable[[bool], Awaitable[None]] | None = None,
    ) -> None:
        """Relay what comes to the listening socket `sock` until `stop`."""
        options = job.serve_options(None, job.grace, RedactingAccessLogger)
        run(
            self.proxy.app(),
            self.tls,
            dataclasses.replace(options, sock=sock),
            stop,
            on_listening,
            on_stop,
        )


def serve_proxy(
    job: ProxyJob, progress: Progress, stop: threading.Event, reporter: Reporter = QUIET
) -> ServeResult:
    """Route export API requests to the export servers in the routes file (or behind their
    Services) until `stop`, in the job's processes."""
    progress.set_phase(ExportPhase.STARTING)
    share = ProxyShare.of(job)
    announce = _Announcer("export proxy", job, progress, reporter)
    try:
        sock = bind_tcp(job.bind_address, job.listen_port, reuse_port=job.processes > 1)
        port = sock.getsockname()[1]
        with contextlib.closing(sock), ProxyProcesses(job, port, reporter) as others:

            async def drain(expired: bool) -> None:
                progress.set_phase(ExportPhase.DRAINING)
                others.stop()

            share.serve(job, sock, stop, announce, drain)
    finally:
        share.tls.close()
    reporter.event(EventType.NORMAL, "Stopped", "export proxy stopped")
    return ServeResult(
        name="proxy", ended="stopped", listen_port=announce.port, transfers_cut=False
    )
