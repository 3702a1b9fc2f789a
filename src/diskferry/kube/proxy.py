"""The export proxy in a cluster (`host.proxy`): the Deployment `diskferry-export-proxy` of
deploy/, behind its Service (443 to 8443), which finds each export's server through its
headless Service and so needs no route from the operator. What the operator keeps for it,
now and every ENSURE_SECONDS while it leads:

- its certificate, in the Secret `diskferry-export-proxy-tls` (`tls.crt`, `tls.key`, and
  `ca.crt`, the export CA it verifies the servers with), issued for its Service's names from
  the servers' CA and renewed at half its life (the proxy loads changed files for each new
  connection, so downloads go on);
- where the API serves route.openshift.io, its Route: TLS re-encrypt to the Service, the export
  CA as the destination CA, and the annotation `haproxy.router.openshift.io/timeout` (the
  operator's configuration, 10m by default: the router's 30 s would cut long downloads),
  created when absent and patched only where it differs from that, so that labels,
  annotations and fields a user added (its host, its certificate) stay;
- how clients elsewhere reach it (`outside`), as KubeVirt finds it: the host of its Route (the
  one the router admitted it under, else the one it asks for), else of an Ingress of its
  namespace whose backend is its Service, with that Ingress's CA; with neither, none.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import threading
from typing import Any

from diskferry.control.errors import AlreadyExistsError, NotFoundError
from diskferry.control.host.embedded.certs import DaemonCa
from diskferry.control.host.keeping import Keeper
from diskferry.control.host.proxy import Outside
from diskferry.export import service_name
from diskferry.kube.api import KubeApi
from diskferry.kube.pods import service_names
from diskferry.kube.routetimeout import DEFAULT_ROUTE_TIMEOUT, route_timeout
from diskferry.serving.certs import CA_CERT
from diskferry.serving.tls import TLS_CERT

log = logging.getLogger("diskferry.kube")
PROXY = "diskferry-export-proxy"
"""The name of the proxy's Deployment, Service and Route."""
PROXY_TLS = "diskferry-export-proxy-tls"
PROXY_PORT_NAME = "https"
LABELS = {"app.kubernetes.io/name": "diskferry", "app.kubernetes.io/component": "export-proxy"}
TIMEOUT_ANNOTATION = "haproxy.router.openshift.io/timeout"
ENSURE_SECONDS = 10.0
ROUTE = ("route.openshift.io/v1", "Route")
INGRESS = ("networking.k8s.io/v1", "Ingress")
SECRET = ("v1", "Secret")
Obj = dict[str, Any]


def _differs(found: Any, wanted: Any) -> Any:
    """The merge patch that makes `found` hold all of `wanted` (None when it does): only the
    keys of `wanted` that differ, each as `wanted` has it."""
    if not isinstance(wanted, dict) or not isinstance(found, dict):
        return None if found == wanted else wanted
    patch = {}
    for key, value in wanted.items():
        change = _differs(found.get(key), value)
        if change is not None:
            patch[key] = change
    return patch or None


def _backend_is(backend: Obj | None, service: str) -> bool:
    return ((backend or {}).get("service") or {}).get("name") == service


class ClusterProxy(Keeper):
    """Keeps the proxy's certificate and Route in `namespace` through `api`, with `certs`'s
    CA, its Route's timeout `timeout`."""

    def __init__(
        self,
        api: KubeApi,
        certs: DaemonCa,
        namespace: str,
        timeout: str = DEFAULT_ROUTE_TIMEOUT,
        interval: float = ENSURE_SECONDS,
    ) -> None:
        self.api = api
        self.certs = certs
        self.namespace = namespace
        self.timeout = route_timeout(timeout)
        super().__init__("export proxy", interval)
        self.names = service_names(PROXY, namespace)
        self._outside: Outside | str | None = None
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """The proxy's URL from outside, else its Service's in the cluster."""
        outside = self.outside()
        return outside.url if isinstance(outside, Outside) else f"https://{self.names[2]}"

    def external_url(self, namespace: str, name: str) -> str:
        """The base URL of an export through the proxy (see `base_url`)."""
        return Outside(self.base_url, None).export_url(namespace, name)

    def outside(self) -> Outside | str:
        """How clients elsewhere reach the proxy, as last found, or why none can."""
        with self._lock:
            if self._outside is None:
                self._outside = self._find_outside()
            return self._outside

    def serving(self) -> bool:
        """True: the proxy is the cluster's Deployment; an export is ready once its server is."""
        return True

    def finds(self, namespace: str, name: str) -> tuple[str, ...] | None:
        """The names of the Service `virt-export-<name>` of `namespace`, through which the
        proxy reaches the server of `namespace/name`."""
        return service_names(service_name(name), namespace)

    def route(
        self, namespace: str, name: str, port: int, ready: bool, unix_socket: str | None = None
    ) -> None:
        """Nothing: the proxy finds each server through its Service."""

    def drop_route(self, namespace: str, name: str) -> None:
        """Nothing: see `route`."""

    def server_socket(self, job_id: str) -> str | None:
        """None: the proxy reaches servers over TLS."""
        return None

    def drop_server_socket(self, job_id: str) -> None:
        """Nothing: no server listens on a socket for the proxy."""

    def start(self) -> None:
        """Keep the proxy's certificate, Route and way in, now and every `interval`."""
        super().start()
        log.info("export proxy: keeping its certificate and Route in %s", self.namespace)

    def ensure(self) -> None:
        """The proxy's certificate issued or renewed, its Route made or mended, and how clients
        elsewhere reach it found again."""
        self._ensure_certificate()
        self._ensure_route()
        found = self._find_outside()
        with self._lock:
            self._outside = found

    def _ensure_certificate(self) -> None:
        """The proxy's Secret made, or its certificate replaced when due or of another CA."""
        found = self.api.get(*SECRET, self.namespace, PROXY_TLS)
        data = (found or {}).get("data") or {}
        chain = base64.b64decode(data[TLS_CERT]) if data.get(TLS_CERT) else None
        ca = base64.b64decode(data[CA_CERT]) if data.get(CA_CERT) else None
        due = self.certs.renew_at(chain)
        fresh = due is None or due <= self.certs.clock.now() or ca != self.certs.ca_pem()
        if found is not None and not fresh:
            return
        issued = {
            key: base64.b64encode(value).decode()
            for key, value in self.certs.files(self.names).items()
        }
        if found is not None:
            self.api.patch(*SECRET, self.namespace, PROXY_TLS, {"data": issued})
            log.info("export proxy: its certificate is renewed")
            return
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": PROXY_TLS, "namespace": self.namespace, "labels": LABELS},
            "data": issued,
        }
        with contextlib.suppress(AlreadyExistsError):  # made meanwhile: renewed next time
            self.api.create(*SECRET, self.namespace, body)

    def _wanted_route(self) -> Obj:
        """What the operator keeps of the proxy's Route."""
        return {
            "metadata": {"labels": LABELS, "annotations": {TIMEOUT_ANNOTATION: self.timeout}},
            "spec": {
                "to": {"kind": "Service", "name": PROXY},
                "port": {"targetPort": PROXY_PORT_NAME},
                "tls": {
                    "termination": "reencrypt",
                    "destinationCACertificate": self.certs.ca_pem().decode(),
                    "insecureEdgeTerminationPolicy": "Redirect",
                },
            },
        }

    def _route(self) -> Obj | None:
        """The proxy's Route; None when there is none, or the API serves no Routes."""
        try:
            return self.api.get(*ROUTE, self.namespace, PROXY)
        except NotFoundError:  # the cluster serves no route.openshift.io
            return None

    def _routes_served(self) -> bool:
        try:
            self.api.resource(*ROUTE)
        except NotFoundError:
            return False
        return True

    def _ensure_route(self) -> None:
        """Where Routes are served: the proxy's Route created, or patched where it differs
        from what the operator keeps (nothing else of it touched)."""
        if not self._routes_served():
            return
        wanted = self._wanted_route()
        found = self._route()
        if found is None:
            body = {"apiVersion": ROUTE[0], "kind": ROUTE[1], **wanted}
            body["metadata"] = {**wanted["metadata"], "name": PROXY, "namespace": self.namespace}
            try:
                self.api.create(*ROUTE, self.namespace, body)
                log.info("export proxy: its Route %s/%s is created", self.namespace, PROXY)
                return
            except AlreadyExistsError:
                found = self._route() or {}
        patch = _differs(found, wanted)
        if patch is not None:
            self.api.patch(*ROUTE, self.namespace, PROXY, patch)
            log.info("export proxy: its Route is mended: %s", ", ".join(sorted(_keys(patch))))

    def _find_outside(self) -> Outside | str:
        """The host of the proxy's Route, else of an Ingress to its Service; else why none."""
        route = self._route() if self._routes_served() else None
        if route is not None:
            admitted = [i.get("host") for i in (route.get("status") or {}).get("ingress") or []]
            host = next(filter(None, admitted), None) or (route.get("spec") or {}).get("host")
            if host:
                ca = ((route.get("spec") or {}).get("tls") or {}).get("caCertificate")
                return Outside(f"https://{host}", ca)
        ingresses, _ = self.api.list(*INGRESS, self.namespace)
        for ingress in ingresses:
            found = self._ingress_outside(ingress)
            if found is not None:
                return found
        where = f"{self.namespace}/{PROXY}"
        routes = "its Route has no host" if route is not None else "no Route"
        return (
            f"the export proxy's Service {where} is reached from nowhere outside the cluster: "
            f"{routes}, and no Ingress leads to it (deploy/ingress makes one)"
        )

    def _ingress_outside(self, ingress: Obj) -> Outside | None:
        """The way in through `ingress` when it leads to the proxy's Service: the host of its
        rule that does, with the CA of the TLS Secret of that host."""
        spec = ingress.get("spec") or {}
        default = _backend_is(spec.get("defaultBackend"), PROXY)
        for rule in spec.get("rules") or []:
            paths = ((rule.get("http") or {}).get("paths")) or []
            if rule.get("host") and (
                default or any(_backend_is(p.get("backend"), PROXY) for p in paths)
            ):
                return Outside(f"https://{rule['host']}", self._ingress_ca(spec, rule["host"]))
        return None

    def _ingress_ca(self, spec: Obj, host: str) -> str | None:
        """The CA of the Ingress's TLS Secret for `host` (its ca.crt, else its chain), None
        when it names none."""
        for tls in spec.get("tls") or []:
            if host in (tls.get("hosts") or []) and tls.get("secretName"):
                secret = self.api.get(*SECRET, self.namespace, tls["secretName"]) or {}
                data = secret.get("data") or {}
                pem = data.get(CA_CERT) or data.get(TLS_CERT)
                return base64.b64decode(pem).decode() if pem else None
        return None


def _keys(patch: Obj, prefix: str = "") -> list[str]:
    """The paths of the fields a patch sets."""
    found = []
    for key, value in patch.items():
        path = f"{prefix}{key}"
        found += _keys(value, f"{path}.") if isinstance(value, dict) else [path]
    return found
