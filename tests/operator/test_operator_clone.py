"""`diskferry operator --runner pods` against a stand-in cluster of two nodes, driven with kubectl:
a disk of a StorageClass as a real cluster has it (Ceph RBD, WaitForFirstConsumer) is a Block,
ReadWriteMany claim whose volume is made on the node of the worker Pod that first mounts it; a
disk cloned from another across nodes (each class pinned to a node by its allowedTopologies)
is read over NBD from a Pod serving the source's claim on its node by the Pod writing the clone
on the other, its bytes the source's, the serving Pod owned by the clone as the writing one is,
and gone once the clone is done or has failed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from image_support import BUILD_SECONDS
from operator_support import Cluster, wait_holder, wait_ready
from reconcile_support import ready_condition
from standin_support import NODE_CLASSES

pytestmark = [pytest.mark.long, pytest.mark.timeout(BUILD_SECONDS + 900)]
MiB = 1 << 20
STEP = 0.3
EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture
def cluster(tmp_path: Path, pinned: str) -> Iterator[Cluster]:
    made = Cluster(tmp_path, "--nodes", "node-a,node-b")
    yield made
    made.close()


def _operator(cluster: Cluster, pinned: str) -> None:
    cluster.start("pods", "--runner", "pods", "--worker-image", pinned)
    wait_holder(cluster.standin, "pods")


def _get(cluster: Cluster, *what: str) -> dict[str, Any] | None:
    out = kubectl(cluster.standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _items(cluster: Cluster, *what: str) -> list[dict[str, Any]]:
    return json.loads(kubectl(cluster.standin, "get", *what, "-o", "json"))["items"]


def _disk(name: str, storage_class: str, size: str, source: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "persistentVolumeClaim": {"size": size, "storageClassName": storage_class},
                "dataSource": source,
            },
        }
    )


def _http(url: str) -> dict[str, Any]:
    return {"type": "HTTP", "http": {"url": url}}


def _clone_of(name: str) -> dict[str, Any]:
    return {"type": "ObjectRef", "objectRef": {"kind": "VirtualDisk", "name": name}}


def _volume(cluster: Cluster, disk: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The claim of the Ready disk `disk`, and the volume it is bound to."""
    found = _get(cluster, "vd", disk)
    assert found is not None
    pvc = _get(cluster, "pvc", found["status"]["target"]["persistentVolumeClaimName"])
    assert pvc is not None and pvc["status"]["phase"] == "Bound"
    pv = _get(cluster, "pv", pvc["spec"]["volumeName"])
    assert pv is not None and pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    return pvc, pv


def _disk_file(pv: dict[str, Any]) -> Path:
    path = Path(pv["spec"]["hostPath"]["path"])
    return path if pv["spec"]["volumeMode"] == "Block" else path / "disk.img"


def _node(pv: dict[str, Any]) -> str:
    [term] = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    [expression] = term["matchExpressions"]
    return str(expression["values"][0])


def _same(a: Path, b: Path) -> bool:
    done = subprocess.run(["qemu-img", "compare", "-q", "-f", "raw", "-F", "raw", str(a), str(b)])
    return done.returncode == 0


def _bound_to(cluster: Cluster, pod: str) -> str | None:
    """The node the stand-in's scheduler bound the Pod `pod` to, from its log."""
    for line in cluster.standin.log.read_text().splitlines():
        if f"pod default/{pod} bound to " in line:
            return line.rsplit(" ", 1)[-1]
    return None


def test_a_disk_of_a_ceph_rbd_class_is_a_block_claim_made_where_its_pod_runs(
    cluster: Cluster, pinned: str, nginx, images
) -> None:
    kubectl(cluster.standin, "apply", "-f", str(EXAMPLES / "storageclass-ceph-rbd.yaml"))
    _operator(cluster, pinned)
    url = nginx.publish(images.reference, "operator-rbd.raw")
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_disk("rbd", "ceph-rbd", "64Mi", _http(url)))
    wait_ready(cluster.standin, "rbd", "300s")
    pvc, pv = _volume(cluster, "rbd")
    assert pvc["spec"]["volumeMode"] == "Block" and pv["spec"]["volumeMode"] == "Block"
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    uid = (_get(cluster, "vd", "rbd") or {})["metadata"]["uid"]
    assert _node(pv) == _bound_to(cluster, f"diskferry-vd-{uid}")
    assert _same(images.reference, _disk_file(pv))
    assert _disk_file(pv).stat().st_size == 64 * MiB


def test_a_clone_across_nodes_reads_its_source_over_nbd_from_a_pod_beside_it(
    cluster: Cluster, pinned: str, nginx, images
) -> None:
    kubectl(cluster.standin, "apply", "-f", "-", stdin=NODE_CLASSES)
    _operator(cluster, pinned)
    url = nginx.publish(images.reference, "operator-clone.raw")
    kubectl(cluster.standin, "apply", "-f", "-", stdin=_disk("source", "on-a", "48Mi", _http(url)))
    wait_ready(cluster.standin, "source", "300s")
    kubectl(
        cluster.standin,
        "apply",
        "-f",
        "-",
        stdin=_disk("copy", "on-b", "64Mi", _clone_of("source")),
    )
    uid = (_get(cluster, "vd", "copy") or {})["metadata"]["uid"]
    # the serving Pod is the copy's, as the Pod writing it is: it goes with the copy
    serving = wait_until(lambda: _get(cluster, "pod", f"diskferry-serve-vd-{uid}"), 300, STEP)
    [owner] = serving["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("VirtualDisk", "copy", uid)
    wait_ready(cluster.standin, "copy", "300s")
    _, source = _volume(cluster, "source")
    _, copy = _volume(cluster, "copy")
    assert (_node(source), _node(copy)) == ("node-a", "node-b")
    assert _same(_disk_file(source), _disk_file(copy))
    assert _disk_file(copy).stat().st_size == 64 * MiB
    assert _bound_to(cluster, f"diskferry-serve-vd-{uid}") == "node-a"
    assert _bound_to(cluster, f"diskferry-vd-{uid}") == "node-b"
    wait_until(lambda: not _items(cluster, "pods"), 120, STEP)  # the serving Pod is gone too
    # a clone that fails (its size is less than the source's) removes its serving Pod too
    kubectl(
        cluster.standin,
        "apply",
        "-f",
        "-",
        stdin=_disk("small", "on-b", "8Mi", _clone_of("source")),
    )
    failed = wait_until(
        lambda: (
            (disk := _get(cluster, "vd", "small"))
            and (disk.get("status") or {}).get("phase") == "Failed"
            and disk
        ),
        300,
        STEP,
    )
    assert ready_condition(failed["status"])["reason"] in ("SizeTooSmall", "TargetTooSmall")
    serving = f"diskferry-serve-vd-{failed['metadata']['uid']}"
    assert _bound_to(cluster, serving) == "node-a"
    wait_until(lambda: _get(cluster, "pod", serving) is None, 120, STEP)
    kept = _get(cluster, "pod", f"diskferry-vd-{failed['metadata']['uid']}")
    assert kept is not None and kept["metadata"]["labels"]["diskferry.io/kept"] == "true"
