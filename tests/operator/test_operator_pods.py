"""`diskferry operator --runner pods` against the stand-in cluster, driven with kubectl as a user
would, its workers Pods of the built image that the stand-in's kubelet runs in podman and its
claims PVCs that the stand-in's storage provisions: a blank disk is made by a worker Pod on its
claim; a disk from HTTP is imported by a Pod into its prime claim, whose volume is then handed
to the disk's claim; a failed import keeps its Pod and says why in the disk's status, its
Events and the operator's log; an operator killed mid-import and started again finishes the
import with the Pod it had started."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import Cluster, blank_disk, wait_holder, wait_ready
from reconcile_support import ready_condition

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]
MiB = 1 << 20
STEP = 0.3


@pytest.fixture
def cluster(tmp_path: Path, pinned: str) -> Iterator[Cluster]:
    made = Cluster(tmp_path)
    yield made
    made.close()


def _operator(cluster: Cluster, pinned: str, identity: str = "pods") -> Any:
    running = cluster.start(identity, "--runner", "pods", "--worker-image", pinned)
    wait_holder(cluster.standin, identity)
    return running


def _get(cluster: Cluster, *what: str) -> dict[str, Any] | None:
    out = kubectl(cluster.standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _items(cluster: Cluster, *what: str) -> list[dict[str, Any]]:
    return json.loads(kubectl(cluster.standin, "get", *what, "-o", "json"))["items"]


def _http_disk(name: str, url: str, size: str = "64Mi") -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualDisk\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        f"  persistentVolumeClaim: {{size: {size}}}\n"
        f"  dataSource: {{type: HTTP, http: {{url: '{url}'}}}}\n"
    )


def _volume_file(cluster: Cluster, disk: dict[str, Any]) -> Path:
    """The disk's file in the volume its claim is bound to, on the stand-in's host."""
    claim = disk["status"]["target"]["persistentVolumeClaimName"]
    pvc = wait_until(
        lambda: (
            (found := _get(cluster, "pvc", claim))
            and (found.get("status") or {}).get("phase") == "Bound"
            and found
        ),
        30,
        STEP,
    )
    pv = _get(cluster, "pv", pvc["spec"]["volumeName"])
    assert pv is not None and pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    return Path(pv["spec"]["hostPath"]["path"]) / "disk.img"


def _pods_started(cluster: Cluster, name: str) -> int:
    """How many times the stand-in's kubelet started a Pod named `name`."""
    return cluster.standin.log.read_text().count(f"pod default/{name} (uid")


def test_a_blank_disk_is_made_by_a_worker_pod_on_its_claim(cluster: Cluster, pinned: str) -> None:
    running = _operator(cluster, pinned)
    kubectl(cluster.standin, "apply", "-f", "-", stdin=blank_disk("blank"))
    wait_ready(cluster.standin, "blank", "300s")
    disk = _get(cluster, "vd", "blank")
    assert disk is not None
    uid = disk["metadata"]["uid"]
    file = _volume_file(cluster, disk)
    assert file.stat().st_size == 64 * MiB and file.stat().st_blocks == 0
    assert _pods_started(cluster, f"diskferry-vd-blank-{uid}") == 1
    # the succeeded Pod, its Secret and the prime claim go
    wait_until(lambda: not _items(cluster, "pods"), 60, STEP)
    assert not [s for s in _items(cluster, "secrets") if s["metadata"]["name"].endswith(uid)]
    wait_until(lambda: len(_items(cluster, "pvc")) == 1, 60, STEP)
    assert "job vd-blank-" in running.log.read_text()


def test_a_disk_from_http_is_imported_by_a_pod_through_its_prime_claim(
    cluster: Cluster, pinned: str, nginx, images
) -> None:
    _operator(cluster, pinned)
    url = nginx.publish(images.reference, "operator-pods.raw")
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_http_disk("imported", url))
    wait_ready(cluster.standin, "imported", "300s")
    disk = _get(cluster, "vd", "imported")
    assert disk is not None
    file = _volume_file(cluster, disk)
    assert file.stat().st_size == 64 * MiB
    assert images.same(images.reference, file)  # and zeros after it, to the claim's size
    assert _pods_started(cluster, f"diskferry-vd-{disk['metadata']['uid']}") == 1
    wait_until(lambda: len(_items(cluster, "pvc")) == 1, 60, STEP)  # the prime is gone
    reasons = [
        e["reason"] for e in _items(cluster, "events") if e["involvedObject"]["name"] == "imported"
    ]
    assert "Ready" in reasons


def test_a_failed_import_keeps_its_pod_and_says_why(cluster: Cluster, pinned: str, nginx) -> None:
    running = _operator(cluster, pinned)
    url = f"{nginx.url}/missing.raw"
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_http_disk("missing", url))
    failed = wait_until(
        lambda: (
            (disk := _get(cluster, "vd", "missing"))
            and (disk.get("status") or {}).get("phase") == "Failed"
            and disk
        ),
        300,
        STEP,
    )
    condition = ready_condition(failed["status"])
    assert "404" in condition["message"]
    events = [e for e in _items(cluster, "events") if e["involvedObject"]["name"] == "missing"]
    assert any(e["reason"] == condition["reason"] and "404" in e["message"] for e in events)
    name = f"diskferry-vd-{failed['metadata']['uid']}"
    pod = wait_until(
        lambda: (
            (found := _get(cluster, "pod", name))
            and found["metadata"].get("labels", {}).get("diskferry.io/kept") == "true"
            and found
        ),
        60,
        STEP,
    )
    assert pod["status"]["phase"] == "Failed"
    assert "404" in kubectl(cluster.standin, "logs", name)
    logged = running.log.read_text()
    assert any(
        "VirtualDisk default/missing: " in line and "404" in line for line in logged.splitlines()
    )


def test_the_operator_killed_mid_import_finishes_it_with_the_same_pod(
    cluster: Cluster, pinned: str, nginx, tmp_path: Path
) -> None:
    first = _operator(cluster, pinned)
    source = tmp_path / "slow.raw"
    data = os.urandom(8 * MiB)
    source.write_bytes(data)
    url = nginx.publish(source, "operator-killed.raw", slow=True)
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_http_disk("killed", url, "8Mi"))
    importing = wait_until(
        lambda: (
            (disk := _get(cluster, "vd", "killed"))
            and (disk.get("status") or {}).get("progress") not in (None, "", "0%", "100%")
            and disk
        ),
        300,
        STEP,
    )
    name = f"diskferry-vd-{importing['metadata']['uid']}"
    pod = _get(cluster, "pod", name)
    assert pod is not None and pod["status"]["phase"] == "Running"
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(timeout=30)
    second = _operator(cluster, pinned, "pods-again")
    wait_ready(cluster.standin, "killed", "300s")
    disk = _get(cluster, "vd", "killed")
    assert disk is not None
    assert _volume_file(cluster, disk).read_bytes() == data
    assert _pods_started(cluster, name) == 1
    assert f"job vd-{importing['metadata']['uid']}: Pod" not in second.log.read_text()
