"""The stand-in cluster's nodes and scheduler through kubectl: its nodes are registered Ready; a
Pod is bound to the node its claims' volumes allow (a class's allowedTopologies pin its volumes
to a node); a class bound WaitForFirstConsumer gets a claim's volume only once a Pod that uses
it is bound, on that Pod's node; a Pod whose claims are on two nodes stays Pending, saying so as
kube-scheduler does, and ends once deleted. Their containers are not what is tested here: they
name an image that is not there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from control_support import wait_until
from daemon_support import kubectl
from standin_support import NODE_CLASSES, StandIn, start_standin

STEP = 0.3
NO_IMAGE = "localhost/diskferry-absent:0"
CLASSES = (
    NODE_CLASSES
    + """\
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: later}
provisioner: diskferry.io/standin
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{key: kubernetes.io/hostname, values: [node-b]}]
"""
)


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    base = tmp_path_factory.mktemp("standin")
    started = start_standin(base / "data", base / "standin.log", "--nodes", "node-a,node-b")
    kubectl(started, "apply", "-f", "-", stdin=CLASSES)
    yield started
    assert started.stop() == 0


def _get(standin: StandIn, *what: str) -> dict[str, Any] | None:
    out = kubectl(standin, "get", *what, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def _items(standin: StandIn, what: str) -> list[dict[str, Any]]:
    return json.loads(kubectl(standin, "get", what, "-o", "json"))["items"]


def _claim(standin: StandIn, name: str, storage_class: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }
    kubectl(standin, "apply", "-f", "-", stdin=json.dumps(body))


def _pod(standin: StandIn, name: str, *claims: str, finalizer: bool = False) -> None:
    mounts = [{"name": c, "mountPath": f"/claims/{c}"} for c in claims]
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if finalizer:
        meta["finalizers"] = ["diskferry.io/test"]
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": NO_IMAGE, "volumeMounts": mounts}],
            "volumes": [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims],
        },
    }
    kubectl(standin, "apply", "-f", "-", stdin=json.dumps(body))


def _node_of(standin: StandIn, pod: str) -> str:
    return wait_until(
        lambda: ((_get(standin, "pod", pod) or {}).get("spec") or {}).get("nodeName"), 30, STEP
    )


def _bound_volume(standin: StandIn, claim: str) -> dict[str, Any]:
    pvc = wait_until(
        lambda: (
            (found := _get(standin, "pvc", claim))
            and (found.get("status") or {}).get("phase") == "Bound"
            and found
        ),
        30,
        STEP,
    )
    pv = _get(standin, "pv", pvc["spec"]["volumeName"])
    assert pv is not None
    return pv


def _nodes_of(pv: dict[str, Any]) -> list[str]:
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    return [v for term in terms for e in term["matchExpressions"] for v in e["values"]]


def test_the_nodes_are_registered_ready(standin: StandIn) -> None:
    nodes = {n["metadata"]["name"]: n for n in _items(standin, "nodes")}
    assert sorted(nodes) == ["node-a", "node-b"]
    for name, node in nodes.items():
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == name
        assert {"type": "Ready", "status": "True"}.items() <= node["status"]["conditions"][
            0
        ].items()


def test_a_pod_goes_to_the_node_of_its_claims_volume(standin: StandIn) -> None:
    _claim(standin, "pinned", "on-b")
    assert _nodes_of(_bound_volume(standin, "pinned")) == ["node-b"]
    _pod(standin, "follows", "pinned")
    assert _node_of(standin, "follows") == "node-b"
    assert "node-b" in kubectl(standin, "get", "pod", "follows", "-o", "wide")


def test_a_claim_waits_for_its_first_consumer_and_gets_its_node(standin: StandIn) -> None:
    _claim(standin, "waits", "later")
    pvc = _get(standin, "pvc", "waits")
    assert pvc is not None and not pvc["spec"].get("volumeName")
    assert not [pv for pv in _items(standin, "pv") if pv["spec"]["claimRef"]["name"] == "waits"]
    _pod(standin, "consumer", "waits")
    assert _node_of(standin, "consumer") == "node-b"
    pv = _bound_volume(standin, "waits")
    assert _nodes_of(pv) == ["node-b"]
    selected = (_get(standin, "pvc", "waits") or {})["metadata"]["annotations"]
    assert selected["volume.kubernetes.io/selected-node"] == "node-b"


def test_a_pod_whose_claims_are_on_two_nodes_is_unschedulable(standin: StandIn) -> None:
    _claim(standin, "here", "on-a")
    _claim(standin, "there", "on-b")
    _bound_volume(standin, "here")
    _bound_volume(standin, "there")
    _pod(standin, "torn", "here", "there", finalizer=True)
    condition = wait_until(
        lambda: next(
            (
                c
                for c in ((_get(standin, "pod", "torn") or {}).get("status") or {}).get(
                    "conditions"
                )
                or []
                if c["type"] == "PodScheduled"
            ),
            None,
        ),
        30,
        STEP,
    )
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert condition["message"] == (
        "0/2 nodes are available: 2 node(s) had volume node affinity conflict."
    )
    pod = _get(standin, "pod", "torn")
    assert pod is not None and not pod["spec"].get("nodeName")
    assert pod["status"]["phase"] == "Pending"
    kubectl(standin, "delete", "pod", "torn", "--wait=false")
    ended = wait_until(
        lambda: (
            (found := _get(standin, "pod", "torn"))
            and found["status"].get("phase") == "Failed"
            and found
        ),
        30,
        STEP,
    )
    assert ended["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Deleted"
    kubectl(
        standin, "patch", "pod", "torn", "--type", "merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    wait_until(lambda: _get(standin, "pod", "torn") is None, 30, STEP)
