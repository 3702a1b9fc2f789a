"""Uploads in the cluster shape (`diskferry operator --runner pods` against the stand-in, driven
with kubectl and curl as a user would): a VirtualDisk with an Upload source gets an uploader Pod
(the upload server worker of the image) behind a headless Service, its status gives the upload
URLs in Deckhouse's shape, the in-cluster one naming the Service; a qcow2 uploaded there over
TLS (the operator's CA, the Service's name resolved to the Pod's loopback address as the
cluster's DNS would) lands in the disk's claim, and the Pod and its Service go."""

from __future__ import annotations

import ipaddress
import subprocess
from urllib.parse import urlsplit

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import Cluster, wait_ready
from pods_support import STEP, get_object, items, pods_operator, pods_started, volume_file

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]
MiB = 1 << 20


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


def test_an_upload_goes_through_the_uploader_pod_and_its_service(
    pods_cluster: Cluster, pinned: str, images
) -> None:
    pods_operator(pods_cluster, pinned)
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=_upload_disk("uploaded"))
    waiting = wait_until(
        lambda: (
            (disk := get_object(pods_cluster, "vd", "uploaded"))
            and (disk.get("status") or {}).get("phase") == "WaitForUserUpload"
            and disk["status"].get("imageUploadURLs")
            and disk
        ),
        300,
        STEP,
    )
    uid = waiting["metadata"]["uid"]
    name = f"diskferry-vd-{uid}"
    url = waiting["status"]["imageUploadURLs"]["inCluster"]
    where = urlsplit(url)
    assert (where.scheme, where.hostname, where.port) == ("https", f"{name}.default.svc", 8443)
    assert where.path.startswith("/upload/")
    service = get_object(pods_cluster, "service", name)
    assert service is not None and service["spec"]["clusterIP"] == "None"
    assert [p["port"] for p in service["spec"]["ports"]] == [8443]
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid
    [pod] = _selected(pods_cluster, service)
    assert pod["metadata"]["name"] == name and pod["status"]["phase"] == "Running"
    address = pod["status"]["podIP"]
    assert ipaddress.ip_address(address).is_loopback
    curl = [
        "curl", "--silent", "--show-error", "--fail", "--max-time", "120",
        "--cacert", str(pods_cluster.data_dir / "pki" / "ca.crt"),
        "--resolve", f"{where.hostname}:{where.port}:{address}",
        "-T", str(images.get("qcow2")), url,
    ]  # fmt: skip
    done = subprocess.run(curl, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    wait_ready(pods_cluster.standin, "uploaded", "300s")
    disk = get_object(pods_cluster, "vd", "uploaded")
    assert disk is not None
    file = volume_file(pods_cluster, disk)
    assert file.stat().st_size == 64 * MiB
    assert images.same(images.get("qcow2"), file)  # and zeros after it, to the claim's size
    assert pods_started(pods_cluster, name) == 1
    # the succeeded Pod goes, its Service with it
    wait_until(lambda: get_object(pods_cluster, "pod", name) is None, 60, STEP)
    assert get_object(pods_cluster, "service", name) is None
