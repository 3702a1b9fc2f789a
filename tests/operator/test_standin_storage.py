"""The stand-in cluster's storage through kubectl: a claim of a StorageClass is bound to a volume
provisioned for it under the stand-in's data directory (a directory, or a sparse file of its
size for Block); a claim a populator fills is left to it until the volume it filled is handed
over by its claimRef, when the claim it came from is Lost; a volume whose claim is gone is
removed with its backing (Delete) or kept Released (Retain)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from standin_support import StandIn, start_standin

MiB = 1 << 20
CLASSES = """\
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: kept}
reclaimPolicy: Retain
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    base = tmp_path_factory.mktemp("standin")
    started = start_standin(base / "data", base / "standin.log")
    kubectl(started, "apply", "-f", "-", stdin=CLASSES)
    yield started
    assert started.stop() == 0


def _claim(name: str, storage_class: str, mode: str = "Filesystem", **spec: Any) -> str:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "storageClassName": storage_class,
            "volumeMode": mode,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "8Mi"}},
            **spec,
        },
    }
    return json.dumps(body)


def _get(standin: StandIn, *what: str) -> dict[str, Any] | None:
    out = kubectl(standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _bound(standin: StandIn, name: str) -> dict[str, Any]:
    return wait_until(
        lambda: (
            (pvc := _get(standin, "pvc", name))
            and (pvc.get("status") or {}).get("phase") == "Bound"
            and pvc
        ),
        30,
        step=0.3,
    )


def test_a_claim_is_bound_to_a_directory_provisioned_for_it(standin: StandIn) -> None:
    kubectl(standin, "apply", "-f", "-", stdin=_claim("files", "fast"))
    pvc = _bound(standin, "files")
    pv = _get(standin, "pv", pvc["spec"]["volumeName"])
    assert pv is not None
    assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    assert pv["status"]["phase"] == "Bound"
    assert pvc["status"]["capacity"] == {"storage": "8Mi"}
    path = Path(pv["spec"]["hostPath"]["path"])
    assert path.is_dir() and path.is_relative_to(standin.data_dir)


def test_a_block_claim_is_a_sparse_file_of_its_size(standin: StandIn) -> None:
    kubectl(standin, "apply", "-f", "-", stdin=_claim("blocks", "fast", "Block"))
    pvc = _bound(standin, "blocks")
    pv = _get(standin, "pv", pvc["spec"]["volumeName"])
    assert pv is not None and pv["spec"]["volumeMode"] == "Block"
    path = Path(pv["spec"]["hostPath"]["path"])
    assert path.stat().st_size == 8 * MiB and path.stat().st_blocks == 0


def test_a_populated_claim_waits_for_the_volume_handed_to_it(standin: StandIn) -> None:
    source = {"apiGroup": "diskferry.io", "kind": "VirtualDisk", "name": "disk"}
    kubectl(standin, "apply", "-f", "-", stdin=_claim("target", "fast", dataSourceRef=source))
    kubectl(standin, "apply", "-f", "-", stdin=_claim("prime", "fast"))
    prime = _bound(standin, "prime")
    target = _get(standin, "pvc", "target")
    assert target is not None and not target["spec"].get("volumeName")
    volume = prime["spec"]["volumeName"]
    claim_ref = {"namespace": "default", "name": "target", "uid": target["metadata"]["uid"]}
    kubectl(
        standin,
        "patch",
        "pv",
        volume,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"claimRef": claim_ref}}),
    )
    assert _bound(standin, "target")["spec"]["volumeName"] == volume
    wait_until(lambda: (_get(standin, "pvc", "prime") or {})["status"]["phase"] == "Lost", 30, 0.3)
    kubectl(standin, "delete", "pvc", "prime")
    assert _get(standin, "pv", volume) is not None  # its claim is the target now


@pytest.mark.parametrize(("storage_class", "kept"), [("fast", False), ("kept", True)])
def test_a_volume_whose_claim_is_gone(standin: StandIn, storage_class: str, kept: bool) -> None:
    name = f"gone-{storage_class}"
    kubectl(standin, "apply", "-f", "-", stdin=_claim(name, storage_class))
    volume = _bound(standin, name)["spec"]["volumeName"]
    path = Path(_get(standin, "pv", volume)["spec"]["hostPath"]["path"])  # type: ignore[index]
    kubectl(standin, "delete", "pvc", name)
    if kept:
        wait_until(
            lambda: (_get(standin, "pv", volume) or {})["status"]["phase"] == "Released", 30, 0.3
        )
        assert path.is_dir()
    else:
        wait_until(lambda: _get(standin, "pv", volume) is None, 30, 0.3)
        assert not path.exists()
