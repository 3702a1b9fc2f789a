"""VirtualImages in the cluster shape (`diskferry operator --runner pods` against the stand-in,
driven with kubectl): an image kept in a claim (`storage: PersistentVolumeClaim`) is imported
by a worker Pod into its claim, and a disk made from it is copied by a worker Pod that reads the
image's claim and writes the disk's prime claim; an image kept in the image store fails at once,
saying the cluster has none and to keep it in a claim."""

from __future__ import annotations

from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import Cluster, wait_holder, wait_ready
from pods_support import STEP, get_object, items, pods_operator, pods_started, volume_file
from reconcile_support import ready_condition

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]
MiB = 1 << 20


def _image(name: str, url: str, storage: str = "PersistentVolumeClaim") -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualImage\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        f"  storage: {storage}\n"
        f"  dataSource: {{type: HTTP, http: {{url: '{url}'}}}}\n"
    )


def _disk_from_image(name: str, image: str) -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualDisk\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        "  persistentVolumeClaim: {size: 64Mi}\n"
        f"  dataSource: {{type: ObjectRef, objectRef: {{kind: VirtualImage, name: {image}}}}}\n"
    )


def test_a_disk_from_an_image_in_a_claim_is_copied_by_a_pod(
    pods_cluster: Cluster, pinned: str, nginx, images
) -> None:
    pods_operator(pods_cluster, pinned)
    url = nginx.publish(images.get("qcow2"), "operator-image.qcow2")
    manifests = _image("image1", url) + "---\n" + _disk_from_image("from-image", "image1")
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=manifests)
    wait_ready(pods_cluster.standin, "image1", "300s", kind="vi")
    wait_ready(pods_cluster.standin, "from-image", "300s")
    image = get_object(pods_cluster, "vi", "image1")
    disk = get_object(pods_cluster, "vd", "from-image")
    assert image is not None and disk is not None
    assert image["status"]["phase"] == "Ready"
    assert image["status"]["format"] == "qcow2"
    assert images.same(images.reference, volume_file(pods_cluster, image))
    copied = volume_file(pods_cluster, disk)
    assert copied.stat().st_size == 64 * MiB
    assert images.same(images.reference, copied)  # and zeros after it, to the claim's size
    assert pods_started(pods_cluster, f"diskferry-vi-{image['metadata']['uid']}") == 1
    assert pods_started(pods_cluster, f"diskferry-vd-{disk['metadata']['uid']}") == 1


def test_an_image_kept_in_the_store_fails_saying_the_cluster_has_none(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)  # no Pod runs: the image the workers would run is never built
    try:
        cluster.start("no-store", "--runner", "pods", "--worker-image", "localhost/unbuilt:0")
        wait_holder(cluster.standin, "no-store")
        manifest = _image("stored", "http://127.0.0.1:9/d.qcow2", "ContainerRegistry")
        kubectl(cluster.standin, "apply", "-f", "-", stdin=manifest)
        failed = wait_until(
            lambda: (
                (image := get_object(cluster, "vi", "stored"))
                and (image.get("status") or {}).get("phase") == "Failed"
                and image
            ),
            60,
            STEP,
        )
        condition = ready_condition(failed["status"])
        assert condition["reason"] == "ImageStoreUnavailable"
        assert "storage PersistentVolumeClaim" in condition["message"]
        events = [e for e in items(cluster, "events") if e["involvedObject"]["name"] == "stored"]
        assert any(e["type"] == "Warning" and e["reason"] == condition["reason"] for e in events)
        assert not items(cluster, "pods", "--all-namespaces")
    finally:
        cluster.close()
