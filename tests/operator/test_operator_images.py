"""VirtualImages in the cluster shape (`diskferry operator --runner pods` against the stand-in,
driven with kubectl): an image kept in the image store fails at once, saying the cluster has
none and to keep it in a claim."""

from __future__ import annotations

from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import Cluster, wait_holder
from pods_support import STEP, get_object, items
from reconcile_support import ready_condition

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]


def _image(name: str, url: str, storage: str = "PersistentVolumeClaim") -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualImage\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        f"  storage: {storage}\n"
        f"  dataSource: {{type: HTTP, http: {{url: '{url}'}}}}\n"
    )


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
