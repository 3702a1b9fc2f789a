"""What the export tests share: a daemon with the export proxy on a port of its own, a Ready
disk, and downloads over verified TLS with the export token."""

from __future__ import annotations

import base64
import http.client
import os
import ssl
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from control_support import wait_until
from reconcile_support import Daemon, http_source

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.clock import Clock
from diskferry.control.controllers import Controllers
from diskferry.control.host.embedded.certs import CERT_LIFETIME, PKI_DIR, DaemonCa
from diskferry.control.resources.core import SECRETS
from diskferry.control.resources.registry import REGISTRY
from diskferry.export.token import TOKEN_HEADER


class ExportDaemon(Daemon):
    """The store and the controllers, the proxy on `proxy_port`, certificates of `lifetime`,
    and one `clock` for the store and the reconcilers."""

    def __init__(
        self,
        data_dir: Path,
        proxy_port: int,
        lifetime: timedelta = CERT_LIFETIME,
        clock: Clock | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.registry = REGISTRY
        self.objects = ObjectService(data_dir / "state.db", REGISTRY, clock)
        certs = DaemonCa(data_dir / PKI_DIR, lifetime)
        self.controllers = Controllers(
            data_dir, self.objects, workers=2, resync=5, proxy_port=proxy_port, certs=certs
        )
        self.controllers.start()

    def stop_workers(self) -> None:
        """Stop every worker the daemon started and remove their files."""
        runner = self.controllers.runner
        for job in runner.job_ids():
            wait_until(lambda job=job: runner.purge(job, keep_scratch=False), 30)

    def delete(self, kind: str, name: str) -> None:
        self.objects.delete(REGISTRY.by_kind(kind), "default", name)

    @property
    def ca_pem(self) -> str:
        return (self.data_dir / PKI_DIR / "ca.crt").read_text()

    def ready_disk(self, nginx: Any, image: Path, name: str = "vd1") -> dict[str, Any]:
        """A VirtualDisk imported over HTTP from `image` (raw), once Ready."""
        self.apply("VirtualDisk", name, {"dataSource": http_source(nginx.publish(image))})
        disk = self.wait_phase("VirtualDisk", name, "Ready", "Failed")
        assert disk["status"]["phase"] == "Ready", disk["status"]
        return disk

    def token(self, secret_name: str) -> str:
        secret = self.objects.get(SECRETS, "default", secret_name)
        return base64.b64decode(secret["data"]["token"]).decode()

    def export_jobs(self) -> list[str]:
        """The export job directories left."""
        return sorted(p.name for p in (self.data_dir / "jobs").glob("vmexport-*"))

    def workers(self, job: str) -> list[int]:
        """Processes whose working directory is the job's."""
        where = self.data_dir / "jobs" / job
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/cwd").resolve() == where:
                    found.append(int(pid))
            except OSError:
                continue
        return found


def raw_url(link: dict[str, Any]) -> str:
    """The raw format's URL of a link's one volume."""
    (volume,) = link["volumes"]
    return next(f["url"] for f in volume["formats"] if f["format"] == "raw")


def connect(url: str, ca_pem: str) -> http.client.HTTPSConnection:
    """A connection to `url`'s host, verified against `ca_pem`."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cadata=ca_pem)
    return http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=30)


def served_cert(url: str, ca_pem: str) -> bytes:
    """The certificate (DER) the server of `url` presents to a new connection, verified."""
    conn = connect(url, ca_pem)
    try:
        conn.connect()
        assert conn.sock is not None
        return conn.sock.getpeercert(binary_form=True)
    finally:
        conn.close()


def listening_cert(url: str, ca_pem: str) -> bytes | None:
    """`served_cert`, None while nothing listens there yet."""
    try:
        return served_cert(url, ca_pem)
    except ConnectionRefusedError:
        return None


def get(url: str, ca_pem: str, token: str | None) -> tuple[int, bytes]:
    """GET `url` with the token in the export token header: status and body."""
    conn = connect(url, ca_pem)
    try:
        conn.request("GET", urlsplit(url).path, headers={TOKEN_HEADER: token} if token else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def get_when_up(url: str, ca_pem: str, token: str | None) -> tuple[int, bytes]:
    """`get`, once something listens at `url` (the proxy starts with the first export)."""

    def attempt() -> tuple[int, bytes] | None:
        try:
            return get(url, ca_pem, token)
        except ConnectionRefusedError:
            return None

    return wait_until(attempt, 30)
