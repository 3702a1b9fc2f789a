"""The URLs an upload source shows while its server waits: none before the server listens; the
in-cluster one by the address the runner gives, and the external one through the export proxy
once it serves, or, where the proxy finds servers by their Service's names (a cluster's), under
the claim's namespace once the server was started under the name it finds; where nothing
reaches the proxy from outside (a cluster with neither a Route nor an Ingress to it), or the
server was started under another name, the in-cluster one alone, without waiting for the
proxy."""

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

    def __init__(self, service: str = "diskferry-vd-1") -> None:
        self.service = service

    def server_url(self, job_id: str, port: int) -> str | None:
        return f"https://{self.service}.ns.svc:{port}"


class _Proxy:
    """A proxy reached from outside as `outside` says, serving or not; one that `finds` servers
    finds each through the Service `virt-export-<name>`, as a cluster's does."""

    def __init__(self, outside: Outside | str, serving: bool, finds: bool = False) -> None:
        self._outside = outside
        self._serving = serving
        self._finds = finds
        self.routed: list[tuple[str, str, int]] = []

    def finds(self, namespace: str, name: str) -> tuple[str, ...] | None:
        service = f"virt-export-{name}"
        return (
            (service, f"{service}.{namespace}", f"{service}.{namespace}.svc")
            if self._finds
            else None
        )

    def outside(self) -> Outside | str:
        return self._outside

    def serving(self) -> bool:
        return self._serving

    def route(self, namespace: str, name: str, port: int, ready: bool, **_: Any) -> None:
        self.routed.append((namespace, name, port))


def _urls(
    proxy: _Proxy | None, progress: dict[str, Any] | None = LISTENING, runner: _Runner | None = None
) -> dict[str, str]:
    return upload_urls(runner or _Runner(), "vd-1", "ns", progress, proxy)  # type: ignore[arg-type]


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


def test_a_proxy_that_finds_servers_by_name_is_given_the_upload_under_its_claim_s_namespace() -> (
    None
):
    proxy = _Proxy(Outside("https://proxy.example", None), serving=True, finds=True)
    assert _urls(proxy, runner=_Runner("virt-export-vd-1")) == {
        "inCluster": "https://virt-export-vd-1.ns.svc:8443/upload/s3cret",
        "external": "https://proxy.example/api/export.kubevirt.io/v1/namespaces/ns/"
        "virtualmachineexports/vd-1/upload/s3cret",
    }
    assert proxy.routed == []


def test_the_in_cluster_url_alone_for_a_server_started_under_a_name_the_proxy_does_not_find() -> (
    None
):
    proxy = _Proxy(Outside("https://proxy.example", None), serving=True, finds=True)
    assert _urls(proxy) == {"inCluster": "https://diskferry-vd-1.ns.svc:8443/upload/s3cret"}
    assert proxy.routed == []
