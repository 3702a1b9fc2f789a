"""The proxy's routes in a cluster: each export's server found through its headless Service,
`https://<service>.<namespace>.svc:8443`, by the export's namespace and name alone, as the
operator names the Service (`service_name`); each verified against the export CA.

Which exports exist, and which are ready, the cluster's DNS and the servers say. The
operator's Services publish their Pods before they are ready, so a server that refuses the
connection is an export not ready yet (503), as a route that is not ready is on this host. A
name that resolves to nothing is a Service with no Pod address yet, or no Service at all: with
the cluster's API to ask (`ClusterApi`, the Pod's ServiceAccount token), the Service's presence
tells them apart (503 or 404); without, it is taken as none (404). A name that cannot be a
Service's is no export.
"""

from __future__ import annotations

import hashlib
import re
import ssl

from diskferry.export.cluster_api import ClusterApi
from diskferry.export.routes import ClientContexts, Presence, Route
from diskferry.serving.defaults import EXPORT_PORT

SERVICE_PREFIX = "virt-export-"
"""KubeVirt's prefix of an export server's Service name."""
LABEL_MAX = 63
DIGEST_CHARS = 10
_SERVICE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # a DNS-1035 label
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a DNS-1123 label
_EXPORT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def service_name(export: str) -> str:
    """The name of the headless Service of the export `export`'s server: `virt-export-<name>`,
    or, where that is no DNS label (too long, or dotted), as much of it as fits and a digest."""
    name = SERVICE_PREFIX + export
    if len(name) <= LABEL_MAX and _SERVICE.match(name):
        return name
    digest = hashlib.sha256(export.encode()).hexdigest()[:DIGEST_CHARS]
    room = LABEL_MAX - len(SERVICE_PREFIX) - DIGEST_CHARS - 1
    kept = re.sub(r"[^a-z0-9-]", "-", export.lower())[:room].strip("-")
    return f"{SERVICE_PREFIX}{kept}-{digest}" if kept else f"{SERVICE_PREFIX}{digest}"


def service_host(namespace: str, export: str) -> str:
    """The DNS name of the export's Service in the cluster."""
    return f"{service_name(export)}.{namespace}.svc"


def service_url(namespace: str, export: str) -> str:
    """The base URL of the export's server through its Service."""
    return f"https://{service_host(namespace, export)}:{EXPORT_PORT}"


class ServiceRoutes:
    """Routes each export to its Service, verified against the CA in `ca_file` (re-read when it
    changes); asks `api`, where given, whether a Service whose name resolves to nothing
    exists."""

    def __init__(self, ca_file: str, api: ClusterApi | None = None) -> None:
        self.ca_file = ca_file
        self.api = api
        self._contexts = ClientContexts()

    def get(self, namespace: str, name: str) -> Route | None:
        """The route to the export's Service; None where the names could not be an export's."""
        if len(namespace) > LABEL_MAX or not _NAMESPACE.match(namespace):
            return None
        if len(name) > 253 or not _EXPORT.match(name):
            return None
        url = service_url(namespace, name)
        return Route(
            namespace=namespace,
            name=name,
            url=url,
            caFile=self.ca_file,
            refusedWhileStarting=True,
        )

    def unix_sockets(self) -> set[str]:
        """None: every server is reached over TLS."""
        return set()

    def client_context(self, route: Route) -> ssl.SSLContext:
        """The TLS context that verifies a server against the export CA."""
        return self._contexts.get(route.ca_file)

    def presence(self, route: Route) -> Presence | None:
        """The export's Service in the cluster's API; None without the API."""
        if self.api is None:
            return None
        return Presence(
            self.api.service_url(route.namespace, service_name(route.name)),
            self.api.headers(),
            self._contexts.get(self.api.ca_file),
        )
