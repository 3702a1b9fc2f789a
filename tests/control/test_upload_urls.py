"""The URLs an upload source shows while its server waits: none before the server listens; the
in-cluster one by the address the runner gives, and the external one through the export proxy
once it serves; where nothing reaches the proxy from outside (a cluster with neither a Route
nor an Ingress to it), or the proxy takes no routes (a cluster's, which reaches export servers
alone), the in-cluster one alone, without waiting for the proxy."""

from __future__ import annotations

from typing import Any

from diskferry.control.host.proxy import Outside
from diskferry.control.reconcilers.disks.uploads import ROUTE_NAMESPACE, upload_urls

TOKEN = b"s3cret\n2099-01-01T00:00:00+00:00\n"
LISTENING = {"phase": "WaitingForUpload", "details": {"listenPort": 8443}}


class _Runner:
    """What `upload_urls` asks of a runner: the job's token file, and where its server is."""

    def read_file(self, job_id: str, name: str) -> bytes | None:
        return TOKEN

    def server_url(self, job_id: str, port: int) -> str | None:
        return f"https://diskferry-{job_id}.ns.svc:{port}"


class _Proxy:
    """A proxy reached from outside as `outside` says, serving or not."""

    def __init__(self, outside: Outside | str, serving: bool, takes_routes: bool = True) -> None:
        self._outside = outside
        self._serving = serving
        self._takes_routes = takes_routes
        self.routed: list[tuple[str, str, int]] = []

    def takes_routes(self) -> bool:
        return self._takes_routes

    def outside(self) -> Outside | str:
        return self._outside

    def serving(self) -> bool:
        return self._serving

    def route(self, namespace: str, name: str, port: int, ready: bool, **_: Any) -> None:
        self.routed.append((namespace, name, port))


def _urls(proxy: _Proxy | None, progress: dict[str, Any] | None = LISTENING) -> dict[str, str]:
    return upload_urls(_Runner(), "vd-1", progress, proxy)  # type: ignore[arg-type]


def test_both_urls_once_the_server_listens_and_the_proxy_serves() -> None:
    proxy = _Proxy(Outside("https://proxy.example", None), serving=True)
    assert _urls(proxy) == {
        "inCluster": "https://diskferry-vd-1.ns.svc:8443/upload/s3cret",
        "external": f"https://proxy.example/api/export.kubevirt.io/v1/namespaces/"
        f"{ROUTE_NAMESPACE}/virtualmachineexports/vd-1/upload/s3cret",
    }
    assert proxy.routed == [(ROUTE_NAMESPACE, "vd-1", 8443)]
    assert _urls(proxy, {"phase": "Starting"}) == {}
    assert _urls(_Proxy(Outside("https://proxy.example", None), serving=False)) == {}


def test_the_in_cluster_url_alone_where_nothing_reaches_the_proxy_from_outside() -> None:
    proxy = _Proxy("neither a Route nor an Ingress leads to the proxy", serving=False)
    assert _urls(proxy) == {"inCluster": "https://diskferry-vd-1.ns.svc:8443/upload/s3cret"}
    assert proxy.routed == []


def test_the_in_cluster_url_alone_where_the_proxy_reaches_export_servers_alone() -> None:
    proxy = _Proxy(Outside("https://proxy.example", None), serving=True, takes_routes=False)
    assert _urls(proxy) == {"inCluster": "https://diskferry-vd-1.ns.svc:8443/upload/s3cret"}
    assert proxy.routed == []
