"""The operator's manager over the stand-in cluster follows the worker Pods it made for their
owners: a Pod that changes queues the resource that owns it at once, as controller-runtime's
Owns does, and only when the Pods are followed (else the change waits for the next resync); a
Pod deleted while the Pods' changes were lost (a full buffer) is found gone when the Pods alone
are listed again, and queues its owner."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from control_support import wait_until

from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS, VirtualDisk
from diskferry.control.runtime.manager import Manager
from diskferry.control.runtime.reconciler import Result
from diskferry.kube.api import KubeApi
from diskferry.kube.client import KubeClient
from diskferry.kube.owned import OWNED, SELECTORS
from diskferry.kube.pods import WORKERS
from diskferry.kube.source import ClusterSource

DISKS = ("diskferry.io/v1alpha1", "VirtualDisk")
WAIT_SECONDS = 30
NOWHERE = "nowhere"  # a node that is none: a Pod bound to it is neither scheduled nor run


class Counting:
    """A reconciler of VirtualDisks that counts its calls by namespace and name."""

    info = VIRTUAL_DISKS

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def reconcile(self, obj: VirtualDisk) -> Result:
        self.calls[f"{obj.metadata.namespace}/{obj.metadata.name}"] += 1
        return Result.done()


@pytest.fixture
def manager(api: KubeApi, request: pytest.FixtureRequest) -> Iterator[tuple[Manager, Counting]]:
    counting = Counting()
    source = ClusterSource(api, REGISTRY, selectors=SELECTORS)
    owned = OWNED if request.param else ()
    manager = Manager(source, KubeClient(api, REGISTRY), [counting], workers=1, owned=owned)
    manager.start()
    yield manager, counting
    manager.stop()


def _disk(api: KubeApi, namespace: str, name: str) -> dict:
    body = {"metadata": {"name": name}, "spec": {"persistentVolumeClaim": {"size": "1Mi"}}}
    return api.create(*DISKS, namespace, {"apiVersion": DISKS[0], "kind": DISKS[1], **body})


def _settled(api: KubeApi, namespace: str, counting: Counting, marker: str) -> None:
    """Wait until a new disk `marker` was reconciled: with one worker, whatever was queued
    before it was reconciled before it."""
    _disk(api, namespace, marker)
    wait_until(lambda: counting.calls[f"{namespace}/{marker}"] >= 1, WAIT_SECONDS)


@pytest.mark.parametrize("manager", [True, False], indirect=True, ids=["followed", "not"])
def test_a_worker_pod_that_changes_queues_the_disk_that_owns_it(
    api: KubeApi, namespace: str, manager: tuple[Manager, Counting]
) -> None:
    followed, counting = manager[0].owned, manager[1]
    disk = _disk(api, namespace, "owner")
    _settled(api, namespace, counting, "m0")
    before = counting.calls[f"{namespace}/owner"]
    meta = disk["metadata"]
    owner = {"apiVersion": DISKS[0], "kind": DISKS[1], "name": "owner", "uid": meta["uid"]}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "worker", "labels": WORKERS, "ownerReferences": [owner]},
        "spec": {"containers": [{"name": "c", "image": "localhost/none"}]},
    }
    api.create("v1", "Pod", namespace, pod)
    _settled(api, namespace, counting, "m1")
    after = counting.calls[f"{namespace}/owner"]
    assert before == 1 and (after > 1 if followed else after == 1)


class Hold:
    """What a VirtualDisk bears on (nothing), which holds the manager's watch while it reads
    the disk `name`, until released: the changes meanwhile wait in the buffer."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.holding = threading.Event()
        self.released = threading.Event()

    def __call__(self, obj: dict[str, Any]) -> list[tuple[str, str | None, str]]:
        if obj["metadata"]["name"] == self.name:
            self.holding.set()
            self.released.wait(WAIT_SECONDS)
        return []


def _quiet_pod(api: KubeApi, namespace: str, name: str, owners: list[dict]) -> None:
    meta = {"name": name, "labels": WORKERS, "ownerReferences": owners}
    spec = {"nodeName": NOWHERE, "containers": [{"name": "c", "image": "localhost/none"}]}
    api.create(
        "v1", "Pod", namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    )


def test_a_pod_deleted_while_the_pods_changes_were_lost_queues_its_owner(
    api: KubeApi, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="diskferry.kube")
    counting, hold = Counting(), Hold("held")
    source = ClusterSource(api, REGISTRY, selectors=SELECTORS, buffer=4)
    client = KubeClient(api, REGISTRY)
    related = {"VirtualDisk": hold}
    manager = Manager(source, client, [counting], workers=1, owned=OWNED, related=related)
    manager.start()
    try:
        meta = _disk(api, namespace, "owner")["metadata"]
        _disk(api, namespace, "bystander")
        owner = {"apiVersion": DISKS[0], "kind": DISKS[1], "name": "owner", "uid": meta["uid"]}
        _quiet_pod(api, namespace, "worker", [owner])
        _settled(api, namespace, counting, "m0")
        before = dict(counting.calls)
        _disk(api, namespace, "held")
        assert hold.holding.wait(WAIT_SECONDS)
        api.delete("v1", "Pod", namespace, "worker")
        for n in range(8):  # the Pods' changes fill the buffer, and are lost
            _quiet_pod(api, namespace, f"flood-{n}", [])
        wait_until(lambda: "pods outran their reader" in caplog.text, WAIT_SECONDS)
        hold.released.set()
        wait_until(lambda: counting.calls[f"{namespace}/owner"] > before[f"{namespace}/owner"])
        _settled(api, namespace, counting, "m1")
        # the Pods alone were listed again: the disks' watch went on, queuing none of them
        assert counting.calls[f"{namespace}/bystander"] == before[f"{namespace}/bystander"]
    finally:
        hold.released.set()
        manager.stop()
