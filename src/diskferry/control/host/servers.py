"""Where the export servers the daemon starts listen, and how they are reached from inside, as
reconcilers see it (`ExportServers`): in a cluster, each on 8443 of its Pod behind a headless
Service of its own; on this host, on 127.0.0.1 with a port of its own, kept in an annotation
of the object it serves so that a server started again keeps its links (`loopback`,
`recorded_port`), and probed there (`answers`)."""

from __future__ import annotations

import http.client
import socket
import ssl
from dataclasses import dataclass
from typing import Protocol, TypeVar

from diskferry.control.resources.model import Resource
from diskferry.control.runtime.client import Client
from diskferry.export import ExportJob

M = TypeVar("M", bound=Resource)
LOOPBACK = "127.0.0.1"
PORT_ANNOTATION = "diskferry.io/export-port"
PROBE_TIMEOUT = 1.0


@dataclass(frozen=True)
class ServerPlace:
    """Where a server listens (its job's address and port), the names its certificate carries,
    and its base URL for clients inside (the internal links)."""

    address: str
    port: int
    sans: tuple[str, ...]
    url: str


def loopback(port: int) -> ServerPlace:
    """A server on this host's 127.0.0.1:`port`."""
    return ServerPlace(LOOPBACK, port, (LOOPBACK,), f"https://{LOOPBACK}:{port}")


def free_port(port: int | None = None) -> int:
    """`port` when it can be listened on at 127.0.0.1, else a free port the system picks."""
    for wanted in ([port] if port else []) + [0]:
        with socket.socket() as probe:
            try:
                probe.bind((LOOPBACK, wanted))
            except OSError:
                continue
            return probe.getsockname()[1]
    raise OSError(f"no free port on {LOOPBACK}")


def answers(port: int, ca_pem: bytes, host: str = LOOPBACK, name: str | None = None) -> bool:
    """Whether the server on `host`:`port` answers its readiness path over TLS verified with
    `ca_pem` (its certificate naming `name`, else `host`)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        with (
            socket.create_connection((host, port), timeout=PROBE_TIMEOUT) as raw,
            context.wrap_socket(raw, server_hostname=name or host) as sock,
        ):
            conn = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT)
            conn.sock = sock
            conn.request("GET", ExportJob.READY_PATH)
            return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False


def recorded_port(client: Client, obj: M) -> tuple[M, int]:
    """The server's port: the one recorded in the object's annotation while it is free, else a
    new one recorded."""
    recorded = obj.metadata.annotations.get(PORT_ANNOTATION)
    port = free_port(int(recorded) if recorded else None)
    if str(port) == recorded:
        return obj, port
    annotations = {**obj.metadata.annotations, PORT_ANNOTATION: str(port)}
    meta = obj.metadata.model_copy(update={"annotations": annotations})
    return client.update(obj.model_copy(update={"metadata": meta})), port


class ExportServers(Protocol):
    """Places each object's export server, and makes it reachable from inside."""

    def service_name(self, obj: Resource) -> str:
        """The name of the Service in front of the object's server, as KubeVirt shows it
        (`virt-export-<name>`, shortened with a digest where that is no DNS label)."""

    def place(self, obj: M, job_id: str) -> tuple[M, ServerPlace]:
        """Where the object's server, the job `job_id`, is to listen when it starts (recorded
        on the object where that must be: the object then)."""

    def placed(self, obj: Resource) -> ServerPlace | None:
        """Where the object's running server listens; None when that is no longer known (it is
        to be started again)."""

    def expose(self, obj: Resource, job_id: str) -> None:
        """Make the started server reachable where its place says (nothing on this host; in a
        cluster its Service, made again when deleted), and what it runs in owned by `obj`."""

    def answers(self, obj: Resource, job_id: str, place: ServerPlace, ca_pem: bytes) -> bool:
        """Whether the server answers its readiness path over TLS verified with `ca_pem`."""

    def unexpose(self, obj: Resource) -> None:
        """Remove what `expose` made."""
