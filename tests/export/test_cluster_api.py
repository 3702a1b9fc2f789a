"""The cluster's API as the proxy finds it in a Pod (the address in its environment, the
ServiceAccount token and CA mounted for it), and what it asks there: an export's Service, by
the name the operator gives it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from diskferry.export import ClusterApi, ProxyJob, service_name
from diskferry.export.cluster_api import TOKEN_LIMIT, TokenUnreadableError
from diskferry.export.service_routes import ServiceRoutes
from diskferry.serving.certs import CA_CERT

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def _mounted(folder: Path, token: bytes = b"sa-token\n") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "token").write_bytes(token)
    (folder / "ca.crt").write_text("")
    return folder


def test_in_a_pod_the_api_is_where_its_environment_says(tmp_path: Path) -> None:
    api = ClusterApi.in_cluster(IN_POD, _mounted(tmp_path / "sa"))
    assert api is not None
    assert api.url == "https://10.96.0.1:443"
    assert api.token_file == str(tmp_path / "sa" / "token")
    assert api.ca_file == str(tmp_path / "sa" / "ca.crt")
    v6 = {**IN_POD, "KUBERNETES_SERVICE_HOST": "fd00::1"}
    assert ClusterApi.in_cluster(v6, tmp_path / "sa").url == "https://[fd00::1]:443"  # type: ignore[union-attr]


def test_outside_a_pod_or_without_a_token_there_is_no_api(tmp_path: Path) -> None:
    assert ClusterApi.in_cluster({}, _mounted(tmp_path / "sa")) is None
    assert ClusterApi.in_cluster(IN_POD, tmp_path / "none") is None


def test_each_request_carries_the_token_as_it_is_now(tmp_path: Path) -> None:
    folder = _mounted(tmp_path / "sa")
    api = ClusterApi.in_cluster(IN_POD, folder)
    assert api is not None
    assert api.headers()["Authorization"] == "Bearer sa-token"
    (folder / "token").write_bytes(b"renewed")
    assert api.headers()["Authorization"] == "Bearer renewed"


@pytest.mark.parametrize(
    "token", [b"", b"\n", b"x" * (TOKEN_LIMIT + 1)], ids=["empty", "blank", "huge"]
)
def test_a_token_that_is_empty_or_too_large_is_refused_unshown(
    tmp_path: Path, token: bytes
) -> None:
    api = ClusterApi.in_cluster(IN_POD, _mounted(tmp_path / "sa", token))
    assert api is not None
    with pytest.raises(TokenUnreadableError) as refused:
        api.headers()
    assert "xxxx" not in str(refused.value)


def test_a_token_gone_is_an_error_naming_its_file(tmp_path: Path) -> None:
    folder = _mounted(tmp_path / "sa")
    api = ClusterApi.in_cluster(IN_POD, folder)
    assert api is not None
    (folder / "token").unlink()
    with pytest.raises(TokenUnreadableError, match="token"):
        api.headers()


def test_the_presence_of_an_export_is_its_service_by_the_operator_s_name(
    tmp_path: Path, ca_dir: Path
) -> None:
    folder = _mounted(tmp_path / "sa")
    shutil.copy(ca_dir / CA_CERT, folder / "ca.crt")
    api = ClusterApi.in_cluster(IN_POD, folder)
    routes = ServiceRoutes(str(ca_dir / CA_CERT), api)
    for name in ("vm1", "disk.of.vm1"):
        route = routes.get("default", name)
        assert route is not None
        presence = routes.presence(route)
        assert presence is not None
        assert presence.url == (
            f"https://10.96.0.1:443/api/v1/namespaces/default/services/{service_name(name)}"
        )
        assert presence.headers["Authorization"] == "Bearer sa-token"


def test_without_the_api_nothing_is_asked() -> None:
    routes = ServiceRoutes("/etc/ca.crt")
    route = routes.get("default", "vm1")
    assert route is not None
    assert routes.presence(route) is None


def test_the_api_is_asked_only_by_a_proxy_that_routes_to_services() -> None:
    api = {"url": "https://10.96.0.1:443", "tokenFile": "t", "caFile": "c"}
    with pytest.raises(ValidationError, match="clusterApi is asked only with servicesCa"):
        ProxyJob.model_validate({"certDir": ".", "routes": "routes.yaml", "clusterApi": api})
    job = ProxyJob.model_validate({"certDir": ".", "servicesCa": "ca.crt", "clusterApi": api})
    assert job.cluster_api is not None and job.cluster_api.url == api["url"]
