"""KubeClient, the reconcilers' Client over a cluster's API, against the stand-in cluster:
reads and writes of models, conflicts, status through its subresource, Events that name the
instance, and requests tried again a bounded number of times."""

from __future__ import annotations

import logging
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from standin_support import StandIn

from diskferry.control.errors import ConflictError
from diskferry.control.resources.core import Event
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.kube.api import Backoff, KubeApi
from diskferry.kube.client import KubeClient
from diskferry.kube.config import api_client
from diskferry.kube.errors import ClusterUnreachableError


def disk(name: str, **labels: str) -> VirtualDisk:
    """A blank VirtualDisk of 64 MiB in `default`."""
    return VirtualDisk.model_validate(
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
        }
    )


@pytest.fixture
def client(api: KubeApi) -> KubeClient:
    return KubeClient(api, REGISTRY, instance="operator-a")


def test_an_object_is_created_read_listed_and_deleted(client: KubeClient) -> None:
    created = client.create(disk("rw-1", team="a"))
    client.create(disk("rw-2", team="b"))
    assert created.metadata.uid
    found = client.get(VirtualDisk, "default", "rw-1")
    assert found is not None and found.metadata.uid == created.metadata.uid
    assert client.get(VirtualDisk, "default", "rw-none") is None
    assert [d.metadata.name for d in client.list(VirtualDisk, labels={"team": "a"})] == ["rw-1"]
    assert {"rw-1", "rw-2"} <= {d.metadata.name for d in client.list(VirtualDisk, "default")}
    client.delete(VirtualDisk, "default", "rw-1")
    assert client.get(VirtualDisk, "default", "rw-1") is None
    client.delete(VirtualDisk, "default", "rw-1")  # gone already: nothing


def test_an_update_from_a_stale_object_is_a_conflict(client: KubeClient) -> None:
    stale = client.create(disk("stale"))
    fresh = stale.model_copy(deep=True)
    fresh.metadata.labels["seen"] = "yes"
    client.update(fresh)
    stale.metadata.labels["seen"] = "no"
    with pytest.raises(ConflictError):
        client.update(stale)
    found = client.get(VirtualDisk, "default", "stale")
    assert found is not None and found.metadata.labels["seen"] == "yes"


def test_status_is_written_through_its_subresource_by_the_operator(client: KubeClient) -> None:
    made = client.create(disk("status"))
    written = client.patch_status(made, {"phase": "Ready", "capacity": "64Mi"})
    assert written.status.phase == "Ready"
    assert written.spec == made.spec
    writers = {
        (entry.manager, entry.subresource) for entry in written.metadata.managed_fields or []
    }
    assert ("diskferry-operator", "status") in writers


def test_the_same_event_again_is_counted_and_names_the_instance(client: KubeClient) -> None:
    made = client.create(disk("evented"))
    client.event(made, "Normal", "Provisioning", "making the claim")
    client.event(made, "Normal", "Provisioning", "making the claim")
    api = client.api
    items, _ = api.list("v1", "Event", "default")
    events = [
        Event.model_validate(item)
        for item in items
        if item["involvedObject"].get("name") == "evented"
    ]
    assert [(e.reason, e.count, e.reporting_instance) for e in events] == [
        ("Provisioning", 2, "operator-a")
    ]


class ReadsRecorded(KubeApi):
    """The API, with the kinds of the objects read by name noted."""

    read: list[str]

    def get(self, api_version: str, kind: str, namespace: str | None, name: str) -> dict | None:
        self.read.append(kind)
        return super().get(api_version, kind, namespace, name)


def test_an_event_is_counted_without_reading_events(standin: StandIn, tmp_path: Path) -> None:
    api = ReadsRecorded(api_client(standin.kubeconfig), discovery_cache=tmp_path / "discovery")
    api.read = []
    client = KubeClient(api, REGISTRY, instance="operator-b")
    made = client.create(disk("unread"))
    for _ in range(3):
        client.event(made, "Warning", "Stuck", "no claim")
    items, _ = api.list("v1", "Event", "default")
    counts = [i["count"] for i in items if i["involvedObject"].get("name") == "unread"]
    assert counts == [3]
    assert "Event" not in api.read  # deploy/'s role lets the operator create and patch them


def test_requests_refused_for_load_are_tried_again(
    api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "diskferry.kube")

    def create(n: int) -> str:
        body = {"metadata": {"name": f"burst-{n}"}, "stringData": {"n": str(n)}}
        return api.create("v1", "Secret", "default", body)["metadata"]["name"]

    # more writes at once than the API takes in flight (4): some are answered 429
    with ThreadPoolExecutor(24) as pool:
        made = list(pool.map(create, range(48)))
    assert made == [f"burst-{n}" for n in range(48)]
    assert any("429" in record.getMessage() for record in caplog.records)


def test_an_api_that_never_answers_is_given_up_after_the_attempts(
    standin: StandIn, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    config = yaml.safe_load(standin.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{closed}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    caplog.set_level(logging.WARNING, "diskferry.kube")
    with pytest.raises(ClusterUnreachableError, match="in 3 tries"):
        KubeApi(api_client(kubeconfig), backoff=Backoff(attempts=3, first=0.01, most=0.02))
    assert len([r for r in caplog.records if "trying again" in r.getMessage()]) == 2
