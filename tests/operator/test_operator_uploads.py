"""Uploads in the cluster shape (`diskferry operator --runner pods` against the stand-in, driven
with kubectl and curl as a user would): a VirtualDisk with an Upload source gets an uploader Pod
(the upload server worker of the image) behind a headless Service named as the export proxy
finds it, and its status gives the upload URLs in Deckhouse's shape: the in-cluster one naming
the Service, the external one through the proxy's Route. A qcow2 uploaded through the proxy
(run as deploy/ runs it, which finds the uploader by its Service's name) lands in the disk's
claim, and the Pod and its Service go."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import NAMESPACE, Cluster, wait_ready
from pods_support import STEP, get_object, items, pods_operator, pods_started, volume_file
from proxy_support import PROXY, export_ca, proxy_curl, proxy_pod, proxy_route

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]
MiB = 1 << 20
HOST = "uploads.apps.example.com"


def _upload_disk(name: str) -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualDisk\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        "  persistentVolumeClaim: {size: 64Mi}\n"
        "  dataSource: {type: Upload}\n"
    )


def _selected(cluster: Cluster, service: dict) -> list[dict]:
    """The Pods the Service selects."""
    wanted = service["spec"]["selector"].items()
    return [
        pod
        for pod in items(cluster, "pods", "-n", service["metadata"]["namespace"])
        if wanted <= (pod["metadata"].get("labels") or {}).items()
    ]


def test_an_upload_goes_through_the_proxy_to_the_uploader_pod_behind_its_service(
    pods_cluster: Cluster, pinned: str, images, tmp_path: Path
) -> None:
    pods_operator(pods_cluster, pinned)
    wait_until(lambda: proxy_route(pods_cluster), 120, STEP)
    host = json.dumps({"spec": {"host": HOST}})  # as the router gives it one
    kubectl(pods_cluster.standin, "patch", "route", PROXY, "-n", NAMESPACE, "--type", "merge",
            "-p", host)  # fmt: skip
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=_upload_disk("uploaded"))
    waiting = wait_until(
        lambda: (
            (disk := get_object(pods_cluster, "vd", "uploaded"))
            and (disk.get("status") or {}).get("phase") == "WaitForUserUpload"
            and "external" in (disk["status"].get("imageUploadURLs") or {})
            and disk
        ),
        300,
        STEP,
    )
    uid = waiting["metadata"]["uid"]
    name, service_name = f"diskferry-vd-{uid}", f"virt-export-vd-{uid}"
    urls = waiting["status"]["imageUploadURLs"]
    inside, outside = urlsplit(urls["inCluster"]), urlsplit(urls["external"])
    assert (inside.scheme, inside.hostname, inside.port) == (
        "https",
        f"{service_name}.default.svc",
        8443,
    )
    assert inside.path.startswith("/upload/")
    exports = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports"
    assert (outside.scheme, outside.hostname) == ("https", HOST)
    assert outside.path == f"{exports}/vd-{uid}{inside.path}"
    service = get_object(pods_cluster, "service", service_name)
    assert service is not None and service["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in service["spec"]["ports"]] == [8443]
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid
    [pod] = _selected(pods_cluster, service)
    assert pod["metadata"]["name"] == name and pod["status"]["phase"] == "Running"
    assert ipaddress.ip_address(pod["status"]["podIP"]).is_loopback
    # the proxy as deploy/ runs it finds the uploader by its Service's name
    proxy = proxy_pod(pods_cluster, pinned)
    (tmp_path / "ca.crt").write_text(export_ca(pods_cluster))
    sent = proxy_curl(tmp_path / "ca.crt", proxy["status"]["podIP"], outside.path,
                      "--fail", "-T", str(images.get("qcow2")))  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    wait_ready(pods_cluster.standin, "uploaded", "300s")
    disk = get_object(pods_cluster, "vd", "uploaded")
    assert disk is not None
    file = volume_file(pods_cluster, disk)
    assert file.stat().st_size == 64 * MiB
    assert images.same(images.get("qcow2"), file)  # and zeros after it, to the claim's size
    assert pods_started(pods_cluster, name) == 1
    # the succeeded Pod goes, its Service with it
    wait_until(lambda: get_object(pods_cluster, "pod", name) is None, 60, STEP)
    assert get_object(pods_cluster, "service", service_name) is None
