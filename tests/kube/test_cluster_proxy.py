"""What the operator keeps for the export proxy in a cluster, against the stand-in's API (which
serves OpenShift's Routes): the servers' CA in a Secret that every instance issues from, the
proxy's certificate of that CA for its Service's names, renewed at half its life, and its Route
(re-encrypt to its Service, the CA as destination CA, the timeout annotation), created when
absent and patched only where it differs, keeping what a user added; and how clients elsewhere
reach the proxy: its Route's host, else an Ingress's to its Service with that Ingress's CA, else
nowhere."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from diskferry.control.clock import ManualClock
from diskferry.control.host.proxy import Outside
from diskferry.kube.api import KubeApi
from diskferry.kube.certs import CA_SECRET, SecretCa
from diskferry.kube.proxy import PROXY, PROXY_TLS, TIMEOUT_ANNOTATION, ClusterProxy
from diskferry.kube.routetimeout import RouteTimeoutError, route_timeout

ROUTE = ("route.openshift.io/v1", "Route")


def _proxy(api: KubeApi, namespace: str, pki: Path, timeout: str = "10m") -> ClusterProxy:
    return ClusterProxy(api, SecretCa(api, namespace, pki), namespace, timeout)


def _decoded(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


def test_the_proxy_gets_a_certificate_of_the_servers_ca_and_a_route(
    api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    proxy = _proxy(api, namespace, tmp_path / "pki")
    proxy.ensure()
    ca = proxy.certs.ca_pem()
    assert _decoded(api.get("v1", "Secret", namespace, CA_SECRET) or {}, "tls.crt") == ca
    tls = api.get("v1", "Secret", namespace, PROXY_TLS)
    assert tls is not None and tls["type"] == "kubernetes.io/tls"
    assert _decoded(tls, "ca.crt") == ca
    cert = x509.load_pem_x509_certificate(_decoded(tls, "tls.crt"))
    assert cert.issuer == x509.load_pem_x509_certificate(ca).subject
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{PROXY}.{namespace}.svc" in names.get_values_for_type(x509.DNSName)
    route = api.get(*ROUTE, namespace, PROXY)
    assert route is not None
    assert route["metadata"]["annotations"][TIMEOUT_ANNOTATION] == "10m"
    assert route["spec"]["to"] == {"kind": "Service", "name": PROXY}
    assert route["spec"]["tls"]["termination"] == "reencrypt"
    assert route["spec"]["tls"]["destinationCACertificate"] == ca.decode()
    why = proxy.outside()
    assert isinstance(why, str) and "no Ingress" in why
    assert proxy.external_url("ns", "vm1") == (
        f"https://{PROXY}.{namespace}.svc/api/export.kubevirt.io/v1/namespaces/ns/"
        "virtualmachineexports/vm1"
    )


def test_the_proxy_s_certificate_is_renewed_at_half_its_life(
    api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    clock = ManualClock(datetime.now(UTC))
    certs = SecretCa(api, namespace, tmp_path / "pki", clock=clock)
    proxy = ClusterProxy(api, certs, namespace)
    proxy.ensure()
    first = _decoded(api.get("v1", "Secret", namespace, PROXY_TLS) or {}, "tls.crt")
    clock.advance((certs.lifetime / 2).total_seconds() - 60)
    proxy.ensure()
    assert _decoded(api.get("v1", "Secret", namespace, PROXY_TLS) or {}, "tls.crt") == first
    clock.advance(120)
    proxy.ensure()
    renewed = api.get("v1", "Secret", namespace, PROXY_TLS) or {}
    assert _decoded(renewed, "tls.crt") != first
    assert _decoded(renewed, "ca.crt") == certs.ca_pem()


def test_the_route_is_patched_only_where_it_differs_and_keeps_what_a_user_added(
    api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    _proxy(api, namespace, tmp_path / "pki").ensure()
    users = {
        "metadata": {
            "labels": {"team": "storage"},
            "annotations": {"example.com/owner": "me", TIMEOUT_ANNOTATION: "30s"},
        },
        "spec": {"host": "exports.apps.example.com", "tls": {"termination": "edge"}},
    }
    api.patch(*ROUTE, namespace, PROXY, users)
    again = _proxy(api, namespace, tmp_path / "pki")  # an operator started again
    again.ensure()
    route = api.get(*ROUTE, namespace, PROXY) or {}
    assert route["metadata"]["annotations"] == {
        "example.com/owner": "me",
        TIMEOUT_ANNOTATION: "10m",
    }
    assert route["metadata"]["labels"]["team"] == "storage"
    assert route["spec"]["host"] == "exports.apps.example.com"
    assert route["spec"]["tls"]["termination"] == "reencrypt"
    version = route["metadata"]["resourceVersion"]
    again.ensure()
    assert (api.get(*ROUTE, namespace, PROXY) or {})["metadata"]["resourceVersion"] == version
    assert again.outside() == Outside("https://exports.apps.example.com", None)
    assert again.base_url == "https://exports.apps.example.com"
    _proxy(api, namespace, tmp_path / "pki", timeout="20m").ensure()
    route = api.get(*ROUTE, namespace, PROXY) or {}
    assert route["metadata"]["annotations"][TIMEOUT_ANNOTATION] == "20m"
    assert route["metadata"]["annotations"]["example.com/owner"] == "me"


def test_an_ingress_to_the_proxy_s_service_is_the_way_in_with_its_ca(
    api: KubeApi, namespace: str, tmp_path: Path
) -> None:
    proxy = _proxy(api, namespace, tmp_path / "pki")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "ingress-tls", "namespace": namespace},
        "type": "kubernetes.io/tls",
        "data": {"ca.crt": base64.b64encode(b"INGRESS CA").decode()},
    }
    api.create("v1", "Secret", namespace, secret)
    backend = {"service": {"name": PROXY, "port": {"name": "https"}}}
    other = {"service": {"name": "elsewhere", "port": {"number": 80}}}
    ways = (("other", "other.example.com", other), ("in", "in.example.com", backend))
    for name, host, to in ways:
        ingress = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "tls": [{"hosts": [host], "secretName": "ingress-tls"}],
                "rules": [
                    {
                        "host": host,
                        "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": to}]},
                    }
                ],
            },
        }
        api.create("networking.k8s.io/v1", "Ingress", namespace, ingress)
    proxy.ensure()  # its Route has no host
    assert proxy.outside() == Outside("https://in.example.com", "INGRESS CA")


def test_a_route_timeout_is_one_haproxy_reads() -> None:
    assert route_timeout("10m") == "10m"
    for wrong in ("10 minutes", "-1s", "", "0"):
        with pytest.raises(RouteTimeoutError):
            route_timeout(wrong)
