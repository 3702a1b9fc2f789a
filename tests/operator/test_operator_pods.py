"""`diskferry operator --runner pods` against the stand-in cluster, driven with kubectl as a user
would, its workers Pods of the built image that the stand-in's kubelet runs in podman and its
claims PVCs that the stand-in's storage provisions: a blank disk is made by a worker Pod on its
claim; a disk from HTTP is imported by a Pod into its prime claim, whose volume is then handed
to the disk's claim; a failed import keeps its Pod and says why in the disk's status, its
Events and the operator's log; an operator killed mid-import and started again finishes the
import with the Pod it had started."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import Cluster, blank_disk, wait_ready
from pods_support import STEP, get_object, items, pods_operator, pods_started, volume_file
from reconcile_support import ready_condition

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]
MiB = 1 << 20


def _http_disk(name: str, url: str, size: str = "64Mi") -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualDisk\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        f"  persistentVolumeClaim: {{size: {size}}}\n"
        f"  dataSource: {{type: HTTP, http: {{url: '{url}'}}}}\n"
    )


def test_a_blank_disk_is_made_by_a_worker_pod_on_its_claim(
    pods_cluster: Cluster, pinned: str
) -> None:
    running = pods_operator(pods_cluster, pinned)
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=blank_disk("blank"))
    wait_ready(pods_cluster.standin, "blank", "300s")
    disk = get_object(pods_cluster, "vd", "blank")
    assert disk is not None
    uid = disk["metadata"]["uid"]
    file = volume_file(pods_cluster, disk)
    assert file.stat().st_size == 64 * MiB and file.stat().st_blocks == 0
    assert pods_started(pods_cluster, f"diskferry-vd-blank-{uid}") == 1
    # the succeeded Pod, its Secret and the prime claim go
    wait_until(lambda: not items(pods_cluster, "pods"), 60, STEP)
    assert not [s for s in items(pods_cluster, "secrets") if s["metadata"]["name"].endswith(uid)]
    wait_until(lambda: len(items(pods_cluster, "pvc")) == 1, 60, STEP)
    assert "job vd-blank-" in running.log.read_text()


def test_a_disk_from_http_is_imported_by_a_pod_through_its_prime_claim(
    pods_cluster: Cluster, pinned: str, nginx, images
) -> None:
    pods_operator(pods_cluster, pinned)
    url = nginx.publish(images.reference, "operator-pods.raw")
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=_http_disk("imported", url))
    wait_ready(pods_cluster.standin, "imported", "300s")
    disk = get_object(pods_cluster, "vd", "imported")
    assert disk is not None
    file = volume_file(pods_cluster, disk)
    assert file.stat().st_size == 64 * MiB
    assert images.same(images.reference, file)  # and zeros after it, to the claim's size
    assert pods_started(pods_cluster, f"diskferry-vd-{disk['metadata']['uid']}") == 1
    wait_until(lambda: len(items(pods_cluster, "pvc")) == 1, 60, STEP)  # the prime is gone
    reasons = [
        e["reason"]
        for e in items(pods_cluster, "events")
        if e["involvedObject"]["name"] == "imported"
    ]
    assert "Ready" in reasons


def test_a_failed_import_keeps_its_pod_and_says_why(
    pods_cluster: Cluster, pinned: str, nginx
) -> None:
    running = pods_operator(pods_cluster, pinned)
    url = f"{nginx.url}/missing.raw"
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=_http_disk("missing", url))
    failed = wait_until(
        lambda: (
            (disk := get_object(pods_cluster, "vd", "missing"))
            and (disk.get("status") or {}).get("phase") == "Failed"
            and disk
        ),
        300,
        STEP,
    )
    condition = ready_condition(failed["status"])
    assert "404" in condition["message"]
    events = [e for e in items(pods_cluster, "events") if e["involvedObject"]["name"] == "missing"]
    assert any(e["reason"] == condition["reason"] and "404" in e["message"] for e in events)
    name = f"diskferry-vd-{failed['metadata']['uid']}"
    pod = wait_until(
        lambda: (
            (found := get_object(pods_cluster, "pod", name))
            and found["metadata"].get("labels", {}).get("diskferry.io/kept") == "true"
            and found
        ),
        60,
        STEP,
    )
    assert pod["status"]["phase"] == "Failed"
    assert "404" in kubectl(pods_cluster.standin, "logs", name)
    logged = running.log.read_text()
    assert any(
        "VirtualDisk default/missing: " in line and "404" in line for line in logged.splitlines()
    )


def test_the_operator_killed_mid_import_finishes_it_with_the_same_pod(
    pods_cluster: Cluster, pinned: str, nginx, tmp_path: Path
) -> None:
    first = pods_operator(pods_cluster, pinned)
    source = tmp_path / "slow.raw"
    data = os.urandom(8 * MiB)
    source.write_bytes(data)
    url = nginx.publish(source, "operator-killed.raw", slow=True)
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=_http_disk("killed", url, "8Mi"))
    importing = wait_until(
        lambda: (
            (disk := get_object(pods_cluster, "vd", "killed"))
            and (disk.get("status") or {}).get("progress") not in (None, "", "0%", "100%")
            and disk
        ),
        300,
        STEP,
    )
    name = f"diskferry-vd-{importing['metadata']['uid']}"
    pod = get_object(pods_cluster, "pod", name)
    assert pod is not None and pod["status"]["phase"] == "Running"
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(timeout=30)
    second = pods_operator(pods_cluster, pinned, "pods-again")
    wait_ready(pods_cluster.standin, "killed", "300s")
    disk = get_object(pods_cluster, "vd", "killed")
    assert disk is not None
    assert volume_file(pods_cluster, disk).read_bytes() == data
    assert pods_started(pods_cluster, name) == 1
    assert f"job vd-{importing['metadata']['uid']}: Pod" not in second.log.read_text()
