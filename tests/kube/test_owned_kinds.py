"""The operator's manager over the stand-in cluster follows the worker Pods it made for their
owners: a Pod that changes queues the resource that owns it at once, as controller-runtime's
Owns does, and only when the Pods are followed (else the change waits for the next resync)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

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
