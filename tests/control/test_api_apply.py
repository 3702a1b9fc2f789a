"""Server-side apply through the API: field managers, managedFields, removals, conflicts."""

from __future__ import annotations

import json
from typing import Any

import yaml
from api_support import VD, client, server
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http.app import ApiServer

__all__ = ["client", "server"]

APPLY = {"Content-Type": "application/apply-patch+yaml"}
MERGE = {"Content-Type": "application/merge-patch+json"}


def _config(labels: dict[str, str] | None = None, size: str = "64Mi") -> str:
    meta: dict[str, Any] = {"name": "ssa"}
    if labels:
        meta["labels"] = labels
    return yaml.safe_dump(
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "metadata": meta,
            "spec": {"persistentVolumeClaim": {"size": size}},
        }
    )


def _apply(client: TestClient, text: str, manager: str, **params: str) -> Any:
    return client.patch(
        f"{VD}/ssa", content=text, headers=APPLY, params={"fieldManager": manager, **params}
    )


def _managers(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["manager"]: e for e in obj["metadata"]["managedFields"]}


def test_a_field_the_manager_no_longer_applies_is_removed(client: TestClient) -> None:
    first = _apply(client, _config({"a": "1", "b": "2"}), "kubectl")
    assert first.status_code == 201
    (entry,) = first.json()["metadata"]["managedFields"]
    assert entry["manager"] == "kubectl" and entry["operation"] == "Apply"
    assert entry["apiVersion"] == "diskferry.io/v1alpha1" and entry["fieldsType"] == "FieldsV1"
    assert entry["time"].endswith("Z")
    assert entry["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:a": {}, "f:b": {}}},
        "f:spec": {"f:persistentVolumeClaim": {"f:size": {}}},
    }
    second = _apply(client, _config({"a": "1"}), "kubectl")
    assert second.status_code == 200
    assert second.json()["metadata"]["labels"] == {"a": "1"}
    assert "f:b" not in _managers(second.json())["kubectl"]["fieldsV1"]["f:metadata"]["f:labels"]
    assert client.get(f"{VD}/ssa").json()["metadata"]["labels"] == {"a": "1"}
    again = _apply(client, _config({"a": "1"}), "kubectl")
    assert (
        again.json()["metadata"]["resourceVersion"] == second.json()["metadata"]["resourceVersion"]
    )


def test_another_manager_changing_a_field_is_a_conflict_unless_forced(
    client: TestClient, server: ApiServer
) -> None:
    _apply(client, _config(), "alice")
    rv = server.service.resource_version()
    refused = _apply(client, _config(size="128Mi"), "bob")
    assert refused.status_code == 409
    status = refused.json()
    assert (status["kind"], status["apiVersion"], status["status"]) == ("Status", "v1", "Failure")
    assert (status["reason"], status["code"]) == ("Conflict", 409)
    assert status["message"] == (
        'Apply failed with 1 conflict: conflict with "alice" using diskferry.io/v1alpha1:'
        " .spec.persistentVolumeClaim.size"
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "alice" using diskferry.io/v1alpha1',
            "field": ".spec.persistentVolumeClaim.size",
        }
    ]
    assert server.service.resource_version() == rv

    forced = _apply(client, _config(size="128Mi"), "bob", force="true")
    assert forced.status_code == 200
    obj = forced.json()
    assert obj["spec"]["persistentVolumeClaim"]["size"] == "128Mi"
    assert "alice" not in _managers(obj)
    assert _managers(obj)["bob"]["fieldsV1"]["f:spec"]


def test_a_field_two_managers_apply_alike_is_shared_and_kept(client: TestClient) -> None:
    _apply(client, _config({"team": "x"}), "alice")
    shared = _apply(client, _config({"team": "x"}), "bob")
    assert shared.status_code == 200
    assert set(_managers(shared.json())) == {"alice", "bob"}
    left = _apply(client, _config(), "alice")
    assert left.json()["metadata"]["labels"] == {"team": "x"}
    gone = _apply(client, _config(), "bob")
    assert "labels" not in gone.json()["metadata"]


def test_apply_needs_a_field_manager(client: TestClient) -> None:
    answer = client.patch(f"{VD}/ssa", content=_config(), headers=APPLY)
    assert answer.status_code == 400
    assert "fieldManager" in answer.json()["message"]


def test_managed_fields_a_client_wrote_wrong_are_no_error(client: TestClient) -> None:
    created = _apply(client, _config({"a": "1"}), "alice").json()
    created["metadata"]["managedFields"] = [{"manager": "bob", "fieldsV1": "nonsense"}]
    assert client.put(f"{VD}/ssa", json=created).status_code == 200
    applied = _apply(client, _config(), "alice")
    assert applied.status_code == 200
    assert set(_managers(applied.json())) == {"alice"}


def test_apply_to_the_status_subresource_merges_it(client: TestClient) -> None:
    _apply(client, _config(), "kubectl")
    status = yaml.safe_dump({**yaml.safe_load(_config()), "status": {"phase": "Ready"}})
    answer = client.patch(
        f"{VD}/ssa/status", content=status, headers=APPLY, params={"fieldManager": "kubectl"}
    )
    assert answer.status_code == 200
    assert answer.json()["status"]["phase"] == "Ready"
    assert set(_managers(answer.json())) == {"kubectl"}


def test_fields_a_create_or_patch_changed_are_its_managers(client: TestClient) -> None:
    body = yaml.safe_load(_config({"a": "1"}))
    created = client.post(VD, json=body, params={"fieldManager": "maker"}).json()
    (entry,) = created["metadata"]["managedFields"]
    assert (entry["manager"], entry["operation"]) == ("maker", "Update")
    assert entry["fieldsV1"]["f:spec"] == {"f:persistentVolumeClaim": {"f:size": {}}}
    assert _apply(client, _config({"a": "1"}), "alice").status_code == 200
    refused = _apply(client, _config({"a": "2"}), "alice")
    assert refused.status_code == 409
    assert refused.json()["details"]["causes"][0]["field"] == ".metadata.labels.a"

    size = json.dumps({"spec": {"persistentVolumeClaim": {"size": "96Mi"}}})
    patched = client.patch(
        f"{VD}/ssa", content=size, headers=MERGE, params={"fieldManager": "editor"}
    ).json()
    managers = _managers(patched)
    assert managers["editor"]["fieldsV1"] == {"f:spec": {"f:persistentVolumeClaim": {"f:size": {}}}}
    assert "f:spec" not in managers["maker"]["fieldsV1"]
    taken = _apply(client, _config(size="128Mi"), "alice").json()
    assert taken["details"]["causes"][0]["message"].startswith('conflict with "editor"')

    patched["status"] = {"phase": "Ready"}
    del patched["metadata"]["managedFields"]
    status = client.put(f"{VD}/ssa/status", json=patched, params={"fieldManager": "ctl"}).json()
    ctl = _managers(status)["ctl"]
    assert (ctl["operation"], ctl["subresource"]) == ("Update", "status")
    assert ctl["fieldsV1"] == {"f:status": {"f:phase": {}}}
    assert {"maker", "alice", "editor"} <= set(_managers(status))
