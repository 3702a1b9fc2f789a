"""The reconcile tests' daemon: the store and the controllers over one data directory."""

from __future__ import annotations

import http.client
import ssl
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from control_support import wait_until

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.clock import Clock
from diskferry.control.controllers import Controllers
from diskferry.control.errors import NotFoundError
from diskferry.control.host.servers import free_port
from diskferry.control.host.volumes import Volumes
from diskferry.control.resources.core import EVENTS
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.stop import stop_data_dir

STOP_SECONDS = 30
RESYNC_SECONDS = 5.0


class Daemon:
    """The store and the controllers over one data directory, as `diskferry serve` runs them."""

    def __init__(
        self,
        data_dir: Path,
        registry: Registry = REGISTRY,
        clock: Clock | None = None,
        proxy_port: int | None = None,
        resync: float = RESYNC_SECONDS,
        volumes: Volumes | None = None,
        runner: Runner | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.registry = registry
        self.proxy_port = proxy_port or free_port()
        self.objects = ObjectService(data_dir / "state.db", registry, clock)
        self.controllers = Controllers(
            data_dir,
            self.objects,
            workers=2,
            resync=resync,
            proxy_port=self.proxy_port,
            volumes=volumes,
            runner=runner,
        )
        self.controllers.start()

    def stop(self, *, workers: bool = False) -> None:
        """Stop the controllers; with `workers`, every worker of the data directory too, as
        `diskferry serve --stop` does (else they run on, for a daemon started again)."""
        self.controllers.stop()
        self.objects.close()
        if workers:
            stop_data_dir(self.data_dir, STOP_SECONDS)

    def detach_loops(self) -> None:
        """Detach the loop devices a test left over claims of this data directory."""
        listed = subprocess.run(
            ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in listed.stdout.splitlines():
            name, _, backing = line.strip().partition(" ")
            if backing.strip().startswith(str(self.data_dir)):
                subprocess.run(["losetup", "--detach", name], check=False)

    def apply(self, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        info = self.registry.by_kind(kind)
        body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
        return self.objects.create(info, "default", body)[0]

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return self.objects.get(self.registry.by_kind(kind), "default", name)
        except NotFoundError:
            return None

    def wait_phase(self, kind: str, name: str, *phases: str, timeout: float = 120) -> dict:
        """The object once its phase is one of `phases`."""
        return wait_until(
            lambda: (
                (o := self.get(kind, name)) and o.get("status", {}).get("phase") in phases and o
            ),
            timeout,
        )

    def wait_phase_of(self, info: KindInfo, name: str, *phases: str, timeout: float = 60) -> dict:
        """The cluster-scoped object of `info` once its phase is one of `phases`."""

        def found() -> dict[str, Any] | None:
            try:
                obj = self.objects.get(info, None, name)
            except NotFoundError:
                return None
            return obj if obj.get("status", {}).get("phase") in phases else None

        return wait_until(found, timeout)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.objects.list(EVENTS, "default").items
            if e["involvedObject"]["name"] == name
        ]

    def claim(self, obj: dict[str, Any]) -> Path:
        status = obj["status"]
        name = status["target"]["persistentVolumeClaimName"]
        return self.data_dir / "volumes" / status["storageClassName"] / "default" / f"{name}.img"


def ready_condition(status: dict[str, Any]) -> dict[str, Any]:
    """The `Ready` condition of `status`."""
    return next(c for c in status.get("conditions", []) if c["type"] == "Ready")


def http_source(url: str, **extra: Any) -> dict[str, Any]:
    """An HTTP data source."""
    return {"type": "HTTP", "http": {"url": url, **extra}}


def put_upload(url: str, body: bytes, ca: Path) -> int:
    """PUT `body` to the upload URL `url` (HTTPS, trusting `ca`); the answer's status."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=60)
    try:
        conn.request("PUT", parts.path, body=body)
        return conn.getresponse().status
    finally:
        conn.close()
