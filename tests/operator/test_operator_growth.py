"""`diskferry operator --runner pods` grows a disk as Deckhouse's controller does: a Ready disk
whose size is raised goes Resizing, its PVC's request is raised, the stand-in's storage expands
its volume, a worker Pod grows its disk file once, and the disk is Ready again showing its new
capacity, its data as it was. A disk of a class that does not allow volume expansion stays Ready
at its size, and its Ready condition and a Warning Event say why."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import wait_ready
from pods_support import STEP, get_object, items, pods_operator, pods_started, volume_file
from reconcile_support import ready_condition
from standin_support import EXPANSION_CLASSES

from diskferry.kube.volumes import requested

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]
MiB = 1 << 20
GROWN = '{"spec": {"persistentVolumeClaim": {"size": "128Mi"}}}'


def _disk(name: str, storage_class: str, url: str) -> str:
    return (
        "apiVersion: diskferry.io/v1alpha1\n"
        "kind: VirtualDisk\n"
        f"metadata: {{name: {name}, namespace: default}}\n"
        "spec:\n"
        f"  persistentVolumeClaim: {{size: 64Mi, storageClassName: {storage_class}}}\n"
        f"  dataSource: {{type: HTTP, http: {{url: '{url}'}}}}\n"
    )


def test_a_ready_disk_grows_its_pvc_and_shows_its_new_capacity(
    pods_cluster, pinned: str, nginx, tmp_path: Path
) -> None:
    kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=EXPANSION_CLASSES)
    running = pods_operator(pods_cluster, pinned)
    data = os.urandom(MiB)
    (tmp_path / "head.raw").write_bytes(data)
    url = nginx.publish(tmp_path / "head.raw", "operator-growth.raw")
    for name, storage_class in (("grows", "growing"), ("fixed", "fixed")):
        kubectl(pods_cluster.standin, "apply", "-f", "-", stdin=_disk(name, storage_class, url))
    for name in ("grows", "fixed"):
        wait_ready(pods_cluster.standin, name, "300s")
        assert (get_object(pods_cluster, "vd", name) or {})["status"]["capacity"] == "64Mi"
        kubectl(pods_cluster.standin, "patch", "vd", name, "--type", "merge", "-p", GROWN)

    grown = wait_until(
        lambda: (
            (disk := get_object(pods_cluster, "vd", "grows"))
            and disk["status"].get("capacity") == "128Mi"
            and disk
        ),
        300,
        STEP,
    )
    assert grown["status"]["phase"] == "Ready"
    assert grown["status"]["observedGeneration"] == 2
    file = volume_file(pods_cluster, grown)
    assert file.stat().st_size == 128 * MiB
    with file.open("rb") as read:
        assert read.read(MiB) == data
    claim = get_object(pods_cluster, "pvc", grown["status"]["target"]["persistentVolumeClaimName"])
    assert claim is not None
    assert claim["status"]["capacity"]["storage"] == str(requested(128 * MiB, block=False))
    reasons = [
        e["reason"] for e in items(pods_cluster, "events") if e["involvedObject"]["name"] == "grows"
    ]
    assert "Resizing" in reasons
    uid = grown["metadata"]["uid"]
    assert pods_started(pods_cluster, f"diskferry-vd-grow-{uid}") == 1

    refused = wait_until(
        lambda: (
            (disk := get_object(pods_cluster, "vd", "fixed"))
            and ready_condition(disk["status"]).get("reason") == "VolumeExpansionNotAllowed"
            and disk
        ),
        120,
        STEP,
    )
    assert refused["status"]["phase"] == "Ready" and refused["status"]["capacity"] == "64Mi"
    assert "allowVolumeExpansion: true" in ready_condition(refused["status"])["message"]
    warnings = [
        e
        for e in items(pods_cluster, "events")
        if e["involvedObject"]["name"] == "fixed" and e["type"] == "Warning"
    ]
    assert [e["reason"] for e in warnings] == ["VolumeExpansionNotAllowed"]
    claim = get_object(
        pods_cluster, "pvc", refused["status"]["target"]["persistentVolumeClaimName"]
    )
    assert claim is not None
    assert claim["spec"]["resources"]["requests"]["storage"] == str(requested(64 * MiB, False))
    assert "VolumeExpansionNotAllowed" in running.log.read_text()
