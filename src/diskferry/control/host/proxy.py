"""The export proxy as reconcilers see it: one address that routes external requests to the
export, backup point and upload servers the daemon starts, each under KubeVirt's export path
of a namespace and a name (the embedded host runs a proxy worker; a cluster, a Deployment
behind a Service, reached from outside through a Route or an Ingress when there is one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

API_PATH = "/api/export.kubevirt.io/v1/namespaces/{namespace}/virtualmachineexports/{name}"
"""An export's base path through the proxy, in KubeVirt's current version (v1beta1 routed too)."""


@dataclass(frozen=True)
class Outside:
    """How clients elsewhere reach the proxy: its base URL, and the CA certificates (PEM) that
    verify it there (None: the ones clients trust already)."""

    url: str
    ca: str | None

    def export_url(self, namespace: str, name: str) -> str:
        """The base URL of the export `namespace/name` from outside."""
        return self.url.rstrip("/") + API_PATH.format(namespace=namespace, name=name)


class ExportProxy(Protocol):
    """Routes external requests to the servers on this host."""

    @property
    def base_url(self) -> str:
        """The proxy's URL."""

    def external_url(self, namespace: str, name: str) -> str:
        """The base URL of the export `namespace/name` through the proxy."""

    def outside(self) -> Outside | str:
        """How clients elsewhere reach the proxy, or why none can (a cluster with neither a
        Route nor an Ingress to it)."""

    def serving(self) -> bool:
        """Whether the proxy runs and listens."""

    def finds(self, namespace: str, name: str) -> tuple[str, ...] | None:
        """The names a server is to be reached by for the proxy to find it as `namespace/name`
        with no route (a cluster's proxy: through its Service, named from `name`), its
        Service's own name first; None where the proxy reaches only what `route` names."""

    def route(
        self, namespace: str, name: str, port: int, ready: bool, unix_socket: str | None = None
    ) -> None:
        """Route `namespace/name` to the server on 127.0.0.1:`port` (verified with the servers'
        CA), or over `unix_socket` when the server listens on one; `ready` once it answers."""

    def drop_route(self, namespace: str, name: str) -> None:
        """Stop routing `namespace/name`."""

    def server_socket(self, job_id: str) -> str | None:
        """Where the server of the job `job_id` is to listen for the proxy, None where it
        cannot (it is reached over TLS then)."""

    def drop_server_socket(self, job_id: str) -> None:
        """Remove the socket a killed server of `job_id` left (a stopped one removes its own)."""


class KeptProxy(ExportProxy, Protocol):
    """An export proxy the controllers keep while they run."""

    def start(self) -> None:
        """Begin keeping the proxy."""

    def stop(self) -> None:
        """Stop keeping it (what serves goes on serving)."""
