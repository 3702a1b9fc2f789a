"""Exports in the cluster shape (`diskferry operator --runner pods` against the stand-in, driven
with kubectl and curl as a user would): a VirtualMachineExport of a disk gets an export-server
Pod (its claim read-only, the OVN annotation opening 8443) behind a headless Service
virt-export-NAME on 8443, all owned by the export; its internal links name the Service, its
external ones appear with the host of the proxy's Route (absent before, a condition saying
why); the export proxy, run as deploy/ runs it in a Pod of the stand-in, finds the server by
its Service's name, and a download through it equals the disk; an export unknown gets 404, one
whose Service names a Pod that does not listen yet 503, and one whose Service has no Pod
address yet 503 too (the proxy asks the API); TLS settings put in the proxy's ConfigMap while
it runs hold for its next connections. A slow download through the proxy
outlives the renewal of the server's and the proxy's certificates. The proxy's Route carries the
timeout annotation, and a user's annotation, label and host on it, and the timeout, survive an
operator started again without the data directory of the last (the CA is the one in its
Secret); the timeout is put back when a user removes it."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_support import wait_until
from cryptography import x509
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import NAMESPACE, Cluster, wait_ready
from pods_support import STEP, get_object, pods_operator, volume_file
from proxy_support import PROXY, export_ca, proxy_curl, proxy_pod, proxy_route

from diskferry.control.host.embedded.certs import PKI_DIR

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 1200)]
TIMEOUT = "haproxy.router.openshift.io/timeout"
HOST = "exports.apps.example.com"
EXPORTS = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports"
KEEPING = "export proxy: keeping its certificate and Route"
# certificates renewed every 20 s, and a download of the 64 MiB disk that lasts about a minute
LIFETIME = "40s"
RATE = "1M"


def _http_disk(name: str, url: str) -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualDisk\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        "  persistentVolumeClaim: {size: 64Mi}\n"
        f"  dataSource: {{type: HTTP, http: {{url: '{url}'}}}}\n"
    )


def _export(name: str, disk: str) -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualMachineExport\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        f"spec: {{source: {{apiGroup: diskferry.io, kind: VirtualDisk, name: {disk}}}}}\n"
    )


def _exported(cluster: Cluster, url: str) -> dict[str, Any]:
    """The export `exp` of a disk `src` imported from `url`, once it is Ready."""
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_http_disk("src", url))
    wait_ready(cluster.standin, "src", "300s")
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_export("exp", "src"))
    return _when(
        cluster,
        lambda: (
            (found := get_object(cluster, "vmexport", "exp"))
            and (found.get("status") or {}).get("phase") == "Ready"
            and found
        ),
        300,
    )


def _token_header(cluster: Cluster, export: dict[str, Any]) -> str:
    """The header that carries the export's token."""
    secret = get_object(cluster, "secret", export["status"]["tokenSecretRef"]) or {}
    return f"x-kubevirt-export-token: {base64.b64decode(secret['data']['token']).decode()}"


def _same(cluster: Cluster, downloaded: Path) -> None:
    """Assert that `downloaded` holds the disk `src`."""
    disk = get_object(cluster, "vd", "src")
    assert disk is not None
    compared = subprocess.run(
        ["qemu-img", "compare", "-f", "raw", "-F", "raw", str(downloaded),
         str(volume_file(cluster, disk))],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stdout + compared.stderr


def _service(name: str) -> dict[str, Any]:
    """The Service the operator makes for the export `name`'s server."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"virt-export-{name}", "namespace": "default"},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"example.com/server": name},
            "ports": [{"name": "https", "port": 8443}],
        },
    }


def _starting(name: str, image: str) -> str:
    """The Service of the export `name`'s server, and a Pod of it that runs but does not
    listen (as a server that is starting), as manifests."""
    service = _service(name)
    labels = service["spec"]["selector"]
    sleep = ["python", "-c", "import time; time.sleep(600)"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-server", "namespace": "default", "labels": labels},
        "spec": {"containers": [{"name": "server", "image": image, "command": sleep}]},
    }
    return yaml.safe_dump_all([service, pod])


def _when(cluster: Cluster, what: Any, timeout: float = 120) -> Any:
    return wait_until(what, timeout, STEP)


def test_an_export_is_served_by_its_pod_behind_its_service_and_through_the_proxy(
    pods_cluster: Cluster, pinned: str, nginx, images, tmp_path: Path
) -> None:
    cluster = pods_cluster
    first = pods_operator(cluster, pinned)
    route = _when(cluster, lambda: proxy_route(cluster))
    ca = export_ca(cluster)
    assert route["metadata"]["annotations"][TIMEOUT] == "10m"
    assert route["spec"]["tls"]["termination"] == "reencrypt"
    assert route["spec"]["tls"]["destinationCACertificate"] == ca
    ready = _exported(cluster, nginx.publish(images.reference, "operator-exports.raw"))
    uid = ready["metadata"]["uid"]
    status = ready["status"]
    assert status["serviceName"] == "virt-export-exp"
    internal = status["links"]["internal"]
    base = "https://virt-export-exp.default.svc:8443"
    assert internal["cert"] == ca
    assert {f["url"] for f in internal["volumes"][0]["formats"]} >= {f"{base}/volumes/src/disk.img"}
    assert "external" not in status["links"]
    [external] = [c for c in status["conditions"] if c["type"] == "ExternalLinks"]
    assert (external["status"], external["reason"]) == ("False", "NoExternalHost")
    # the server's Pod and its Service, owned by the export
    pod = get_object(cluster, "pod", f"diskferry-vmexport-{uid}")
    service = get_object(cluster, "service", "virt-export-exp")
    assert pod is not None and service is not None
    assert "port: 8443" in pod["metadata"]["annotations"]["k8s.ovn.org/open-default-ports"]
    claims = [v for v in pod["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims and all(v["persistentVolumeClaim"]["readOnly"] for v in claims)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in service["spec"]["ports"]] == [8443]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    for owned in (pod, service):
        assert uid in {r["uid"] for r in owned["metadata"]["ownerReferences"]}
    # a user gives the Route its host (as the router would), a label and an annotation
    patch = {
        "metadata": {"labels": {"team": "storage"}, "annotations": {"example.com/owner": "me"}},
        "spec": {"host": HOST},
    }
    kubectl(cluster.standin, "patch", "route", PROXY, "-n", NAMESPACE, "--type", "merge",
            "-p", json.dumps(patch))  # fmt: skip
    linked = _when(
        cluster,
        lambda: (
            (found := get_object(cluster, "vmexport", "exp"))
            and "external" in found["status"].get("links", {})
            and found
        ),
    )
    outside = f"https://{HOST}{EXPORTS}/exp"
    formats = linked["status"]["links"]["external"]["volumes"][0]["formats"]
    assert f"{outside}/volumes/src/disk.img" in {f["url"] for f in formats}
    assert "ExternalLinks" not in {c["type"] for c in linked["status"]["conditions"]}
    # the proxy as deploy/ runs it finds the server by its Service's name
    proxy = proxy_pod(cluster, pinned)
    address = proxy["status"]["podIP"]
    header = _token_header(cluster, linked)
    (tmp_path / "ca.crt").write_text(ca)
    out = tmp_path / "downloaded.img"
    done = proxy_curl(tmp_path / "ca.crt", address, f"{EXPORTS}/exp/volumes/src/disk.img",
                 "--fail", "-H", header, "-o", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    _same(cluster, out)
    # its TLS settings come from their ConfigMap, made while it runs: new connections take them
    tls12 = ("--tlsv1.2", "--tls-max", "1.2", "-o", "/dev/null", "-w", "%{http_code}")
    assert proxy_curl(tmp_path / "ca.crt", address, "/", *tls12).stdout == "400"
    settings = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{PROXY}-tls-settings", "namespace": NAMESPACE},
        "data": {"settings.yaml": "minVersion: '1.3'\n"},
    }
    kubectl(cluster.standin, "apply", "-f", "-", stdin=json.dumps(settings))
    refused = _when(
        cluster,
        lambda: (
            (answer := proxy_curl(tmp_path / "ca.crt", address, "/", *tls12)).returncode != 0
            and answer
        ),
        60,
    )
    assert "alert" in refused.stderr.lower() or "ssl" in refused.stderr.lower(), refused.stderr
    unknown = proxy_curl(tmp_path / "ca.crt", address, f"{EXPORTS}/none/volumes/src/disk.img",
                    "-H", header, "-o", "/dev/null", "-w", "%{http_code}")  # fmt: skip
    assert unknown.stdout == "404"
    # an export whose Service names a Pod that does not listen yet is not ready: 503, as here
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_starting("starting", pinned))
    starting_path = f"{EXPORTS}/starting/volumes/src/disk.img"
    starting = _when(
        cluster,
        lambda: (
            (answer := proxy_curl(tmp_path / "ca.crt", address, starting_path, "-H", header, "-i"))
            and answer.stdout.startswith("HTTP/1.1 503")
            and answer
        ),
        120,
    )
    assert "retry-after: 5" in starting.stdout.lower()
    assert json.loads(starting.stdout.partition("\n\n")[2])["reason"] == "ExportNotReady"
    # one whose Service has no Pod address yet (its Pod not placed): its name resolves to
    # nothing, and the proxy, asking the API with its ServiceAccount's token, finds the Service
    kubectl(cluster.standin, "apply", "-f", "-", stdin=json.dumps(_service("unplaced")))
    unplaced = proxy_curl(tmp_path / "ca.crt", address, f"{EXPORTS}/unplaced/volumes/src/disk.img",
                     "-H", header, "-i")  # fmt: skip
    assert unplaced.stdout.startswith("HTTP/1.1 503"), unplaced.stdout + unplaced.stderr
    assert json.loads(unplaced.stdout.partition("\n\n")[2])["reason"] == "ExportNotReady"
    # an operator started again keeps what the user added to the Route, and the timeout; its
    # Pod's data directory (an emptyDir) is new: the CA comes back from its Secret, and the
    # Route's destination CA stays as it was
    version = (proxy_route(cluster) or {})["metadata"]["resourceVersion"]
    assert first.stop() == 0
    shutil.rmtree(cluster.data_dir / PKI_DIR)
    again = pods_operator(cluster, pinned, "pods-again")
    _when(cluster, lambda: KEEPING in again.log.read_text())
    kept = proxy_route(cluster) or {}
    assert kept["metadata"]["resourceVersion"] == version
    assert kept["metadata"]["annotations"] == {"example.com/owner": "me", TIMEOUT: "10m"}
    assert kept["metadata"]["labels"]["team"] == "storage"
    assert kept["spec"]["host"] == HOST
    kubectl(cluster.standin, "annotate", "route", PROXY, "-n", NAMESPACE, f"{TIMEOUT}-")
    mended = _when(
        cluster,
        lambda: (
            (found := proxy_route(cluster))
            and found["metadata"]["annotations"].get(TIMEOUT) == "10m"
            and found
        ),
        60,
    )
    assert mended["metadata"]["annotations"]["example.com/owner"] == "me"
    # deleted, the export takes its Pod and its Service with it
    kubectl(cluster.standin, "delete", "vmexport", "exp", "--wait=false")
    _when(cluster, lambda: get_object(cluster, "service", "virt-export-exp") is None, 120)
    _when(cluster, lambda: get_object(cluster, "pod", f"diskferry-vmexport-{uid}") is None, 120)


def _presented(address: str, name: str, ca: str) -> bytes:
    """The certificate (DER) the server at `address`:8443 presents to a new connection for
    `name`, verified against `ca`."""
    context = ssl.create_default_context(cadata=ca)
    with (
        socket.create_connection((address, 8443), timeout=30) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        return tls.getpeercert(binary_form=True) or b""


def _expiry(der: bytes) -> datetime:
    return x509.load_der_x509_certificate(der).not_valid_after_utc


def test_a_download_through_the_proxy_outlives_the_rotation_of_every_certificate_on_its_way(
    pods_cluster: Cluster, pinned: str, nginx, images, tmp_path: Path
) -> None:
    cluster = pods_cluster
    pods_operator(cluster, pinned, "pods", "--server-cert-lifetime", LIFETIME)
    ready = _exported(cluster, nginx.publish(images.reference, "operator-exports.raw"))
    ca = export_ca(cluster)
    (tmp_path / "ca.crt").write_text(ca)
    server = get_object(cluster, "pod", f"diskferry-vmexport-{ready['metadata']['uid']}") or {}
    server_address = server["status"]["podIP"]
    proxy_address = proxy_pod(cluster, pinned)["status"]["podIP"]
    _when(cluster, lambda: proxy_route(cluster))
    kubectl(cluster.standin, "annotate", "route", PROXY, "-n", NAMESPACE, "example.com/owner=me")
    service, proxy_name = "virt-export-exp.default.svc", f"{PROXY}.{NAMESPACE}.svc"
    header = _token_header(cluster, ready)
    out = tmp_path / "downloaded.img"
    server_before = _presented(server_address, service, ca)
    proxy_before = _presented(proxy_address, proxy_name, ca)
    slow = subprocess.Popen(
        ["curl", "--silent", "--show-error", "--fail", "--limit-rate", RATE,
         "--cacert", str(tmp_path / "ca.crt"), "--resolve", f"{proxy_name}:8443:{proxy_address}",
         "-H", header, "-o", str(out),
         f"https://{proxy_name}:8443{EXPORTS}/exp/volumes/src/disk.img"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # both certificates on its way are renewed while the download goes on
        server_after = _when(
            cluster, lambda: (c := _presented(server_address, service, ca)) != server_before and c
        )
        proxy_after = _when(
            cluster, lambda: (c := _presented(proxy_address, proxy_name, ca)) != proxy_before and c
        )
        assert slow.poll() is None, "the download ended before the certificates were renewed"
        assert _expiry(server_after) > _expiry(server_before)
        assert _expiry(proxy_after) > _expiry(proxy_before)
        assert slow.wait(timeout=300) == 0, slow.stderr.read() if slow.stderr else ""
    finally:
        if slow.poll() is None:
            slow.kill()
            slow.wait()
    _same(cluster, out)
    # the proxy's Route, its certificate renewed meanwhile, keeps the user's annotation
    kept = (proxy_route(cluster) or {})["metadata"]["annotations"]
    assert kept == {"example.com/owner": "me", TIMEOUT: "10m"}
    # a new download, through new connections, verifies against the new certificates
    again = tmp_path / "again.img"
    done = proxy_curl(tmp_path / "ca.crt", proxy_address, f"{EXPORTS}/exp/volumes/src/disk.img",
                 "--fail", "-H", header, "-o", str(again))  # fmt: skip
    assert done.returncode == 0, done.stderr
    _same(cluster, again)
