"""What the tests of `diskferry operator --runner pods` share: a stand-in cluster whose Pods run
the built image (the fixture `pods_cluster`), an operator started on it with its workers as
Pods, and what they read back through kubectl: objects, the file a claim's volume holds, how
many times a Pod was started."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from operator_support import Cluster, RunningOperator, wait_holder

STEP = 0.3


@pytest.fixture
def pods_cluster(tmp_path: Path, pinned: str) -> Iterator[Cluster]:
    """A stand-in cluster, stopped with everything it runs after the test."""
    made = Cluster(tmp_path)
    yield made
    made.close()


def pods_operator(
    cluster: Cluster, pinned: str, identity: str = "pods", *options: str
) -> RunningOperator:
    """An operator whose workers are Pods of `pinned` (and its `options`), once it holds the
    Lease."""
    running = cluster.start(identity, "--runner", "pods", "--worker-image", pinned, *options)
    wait_holder(cluster.standin, identity)
    return running


def get_object(cluster: Cluster, *what: str) -> dict[str, Any] | None:
    """`kubectl get WHAT` as JSON, None when there is no such object."""
    out = kubectl(cluster.standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def items(cluster: Cluster, *what: str) -> list[dict[str, Any]]:
    """The objects `kubectl get WHAT` lists."""
    return json.loads(kubectl(cluster.standin, "get", *what, "-o", "json"))["items"]


def volume_file(cluster: Cluster, obj: dict[str, Any]) -> Path:
    """The disk's file in the volume the claim of a disk or an image is bound to, on the
    stand-in's host."""
    claim = obj["status"]["target"]["persistentVolumeClaimName"]
    pvc = wait_until(
        lambda: (
            (found := get_object(cluster, "pvc", claim, "-n", obj["metadata"]["namespace"]))
            and (found.get("status") or {}).get("phase") == "Bound"
            and found
        ),
        30,
        STEP,
    )
    pv = get_object(cluster, "pv", pvc["spec"]["volumeName"])
    assert pv is not None and pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    return Path(pv["spec"]["hostPath"]["path"]) / "disk.img"


def pods_started(cluster: Cluster, name: str, namespace: str = "default") -> int:
    """How many times the stand-in's kubelet started a Pod named `name`."""
    return cluster.standin.log.read_text().count(f"pod {namespace}/{name} (uid")
