"""Dry runs through the API: the answer is what would be stored, the store is left as it was."""

from __future__ import annotations

import json

from api_support import VD, client, disk, server
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http.app import ApiServer

__all__ = ["client", "server"]

DRY = {"dryRun": "All"}
MERGE = {"Content-Type": "application/merge-patch+json"}


def _stored(client: TestClient, server: ApiServer) -> tuple[dict, str]:
    return client.get(f"{VD}/vd1").json(), server.service.resource_version()


def test_a_dry_run_update_keeps_the_resource_version_and_the_store(
    client: TestClient, server: ApiServer
) -> None:
    client.post(VD, json=disk())
    before, store_rv = _stored(client, server)
    rv = before["metadata"]["resourceVersion"]

    bigger = json.loads(json.dumps(before))
    bigger["spec"]["persistentVolumeClaim"]["size"] = "128Mi"
    put = client.put(f"{VD}/vd1", json=bigger, params=DRY)
    assert put.status_code == 200
    assert put.json()["spec"]["persistentVolumeClaim"]["size"] == "128Mi"
    assert put.json()["metadata"]["resourceVersion"] == rv
    # the generation the change would be stored with, as kube-apiserver's dry run shows it
    assert put.json()["metadata"]["generation"] == before["metadata"]["generation"] + 1
    assert _stored(client, server) == (before, store_rv)

    patch = json.dumps({"metadata": {"labels": {"a": "b"}}})
    patched = client.patch(f"{VD}/vd1", content=patch, headers=MERGE, params=DRY)
    assert patched.json()["metadata"]["labels"] == {"a": "b"}
    assert patched.json()["metadata"]["resourceVersion"] == rv
    assert patched.json()["metadata"]["generation"] == before["metadata"]["generation"]
    assert _stored(client, server) == (before, store_rv)

    status = {**before, "status": {"phase": "Ready"}}
    answer = client.put(f"{VD}/vd1/status", json=status, params=DRY)
    assert answer.json()["status"]["phase"] == "Ready"
    assert answer.json()["metadata"]["resourceVersion"] == rv
    assert _stored(client, server) == (before, store_rv)


def test_a_dry_run_create_and_delete_name_no_new_resource_version(
    client: TestClient, server: ApiServer
) -> None:
    created = client.post(VD, json=disk("dry"), params=DRY)
    assert created.status_code == 201
    assert created.json()["metadata"]["uid"]
    assert "resourceVersion" not in created.json()["metadata"]

    client.post(VD, json={**disk(), "metadata": {"name": "vd1", "finalizers": ["f/x"]}})
    before, store_rv = _stored(client, server)
    deleted = client.delete(f"{VD}/vd1", params=DRY)
    assert deleted.json()["metadata"]["deletionTimestamp"]
    assert deleted.json()["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert _stored(client, server) == (before, store_rv)
