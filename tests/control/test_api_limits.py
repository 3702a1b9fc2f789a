"""Hostile requests answered with a Status, never a 500 nor an unbounded object: the body and
object size limits, nesting, YAML anchors and aliases, JSON patch copies, managedFields,
protobuf fields and tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from api_support import SECRETS, TOKEN, VD, client, disk, server
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http.app import ApiServer
from diskferry.control.apiserver.http.limits import MAX_BODY_BYTES
from diskferry.control.apiserver.store.db import MAX_OBJECT_BYTES
from diskferry.control.apiserver.store.values import MAX_DEPTH

__all__ = ["client", "server"]

MERGE = {"Content-Type": "application/merge-patch+json"}
JSON_PATCH = {"Content-Type": "application/json-patch+json"}
STRATEGIC = {"Content-Type": "application/strategic-merge-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}
YAML = {"Content-Type": "application/yaml"}


def nested(depth: int) -> dict:
    """A JSON object `depth` objects deep."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _status(answer, code: int, reason: str) -> dict:
    assert answer.status_code == code, answer.text
    body = answer.json()
    assert body["kind"] == "Status" and body["code"] == code and body["reason"] == reason
    return body


def test_a_token_with_non_ascii_characters_is_401(server: ApiServer) -> None:
    with TestClient(server.app) as anonymous:
        answer = anonymous.get(VD, headers={"Authorization": "Bearer \u00e9t\u00e9".encode()})
        latin = anonymous.get(VD, headers={"Authorization": b"Bearer \xe9t\xe9"})
    _status(answer, 401, "Unauthorized")
    _status(latin, 401, "Unauthorized")


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, json.dumps(nested(MAX_DEPTH + 1))])
def test_json_nested_too_deep_is_400(client: TestClient, text: str) -> None:
    body = _status(client.post(VD, content=text, headers={}), 400, "BadRequest")
    assert "nested" in body["message"]


def test_json_nested_as_deep_as_allowed_reaches_validation(client: TestClient) -> None:
    manifest = disk("deep")
    manifest["spec"] = nested(MAX_DEPTH - 1)
    _status(client.post(VD, json=manifest), 422, "Invalid")


@pytest.mark.parametrize(
    "text",
    [
        "metadata: {name: x}\nspec: &s {persistentVolumeClaim: {size: 1Mi}}\nstatus: *s\n",
        "metadata: &m {name: x}\nspec: {persistentVolumeClaim: {size: 1Mi}}\n",
        "metadata: {name: x}\nx: &a [a, a, a, a, a, a, a, a]\ny: &b [*a, *a, *a, *a, *a, *a]\n"
        "z: [*b, *b, *b, *b, *b, *b, *b, *b]\n",
    ],
    ids=["alias", "anchor", "laughs"],
)
def test_yaml_anchors_and_aliases_are_400(client: TestClient, text: str) -> None:
    body = _status(client.post(VD, content=text, headers=YAML), 400, "BadRequest")
    assert "alias" in body["message"] or "anchor" in body["message"]
    assert client.get(f"{VD}/x").status_code == 404


def test_yaml_nested_too_deep_is_400(client: TestClient) -> None:
    flow = "[" * 5000 + "]" * 5000
    block = "".join(f"{' ' * n}a:\n" for n in range(MAX_DEPTH + 1)) + " " * (MAX_DEPTH + 1) + "b"
    for text in (flow, block):
        body = _status(client.post(VD, content=text, headers=YAML), 400, "BadRequest")
        assert "nest" in body["message"]  # libyaml's own limit names it "nesting depth"


def test_yaml_dates_stay_strings_as_kubernetes_reads_them(client: TestClient) -> None:
    text = (
        "apiVersion: diskferry.io/v1alpha1\nkind: VirtualDisk\n"
        "metadata: {name: dated, annotations: {since: 2026-01-02}}\n"
        "spec: {persistentVolumeClaim: {size: 1Mi}}\n"
    )
    answer = client.post(VD, content=text, headers=YAML)
    assert answer.status_code == 201, answer.text
    assert answer.json()["metadata"]["annotations"] == {"since": "2026-01-02"}


@pytest.mark.parametrize(
    "text", ["metadata: {name: x}\n1: a\n", "metadata: {name: x}\nb: !!binary aGk=\n"]
)
def test_yaml_that_is_no_json_is_400(client: TestClient, text: str) -> None:
    _status(client.post(VD, content=text, headers=YAML), 400, "BadRequest")


@pytest.mark.parametrize(
    ("path", "headers", "patch"),
    [
        (f"{VD}/vd1", MERGE, lambda deep: json.dumps({"metadata": deep})),
        (
            f"{VD}/vd1",
            JSON_PATCH,
            lambda deep: json.dumps([{"op": "add", "path": "/spec/x", "value": deep}]),
        ),
        (f"{SECRETS}/s", STRATEGIC, lambda deep: json.dumps({"metadata": deep})),
        (f"{VD}/vd1", APPLY, lambda deep: json.dumps({**disk(), "spec": deep})),
        (f"{VD}/vd1", MERGE, lambda deep: "[" * 5000 + "]" * 5000),
    ],
    ids=["merge", "json-patch", "strategic", "apply", "merge-of-arrays"],
)
def test_patches_nested_too_deep_are_400(client: TestClient, path, headers, patch) -> None:
    client.post(VD, json=disk())
    client.post(SECRETS, json={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})
    answer = client.patch(
        path, content=patch(nested(MAX_DEPTH + 1)), headers=headers, params={"fieldManager": "m"}
    )
    assert "nested" in _status(answer, 400, "BadRequest")["message"]


def test_a_json_patch_cannot_nest_an_object_deeper_step_by_step(client: TestClient) -> None:
    client.post(VD, json=disk())
    half = nested(MAX_DEPTH // 2)
    path = "/spec/x" + "/a" * (MAX_DEPTH // 2 - 1)
    operations = [
        {"op": "add", "path": "/spec/x", "value": half},
        {"op": "add", "path": path, "value": half},
    ]
    answer = client.patch(f"{VD}/vd1", content=json.dumps(operations), headers=JSON_PATCH)
    assert "nested" in _status(answer, 400, "BadRequest")["message"]


def test_a_json_patch_copying_an_object_into_itself_is_413(client: TestClient) -> None:
    client.post(VD, json=disk())
    operations = [{"op": "copy", "from": "/spec", "path": f"/spec/c{n}"} for n in range(20)]
    answer = client.patch(f"{VD}/vd1", content=json.dumps(operations), headers=JSON_PATCH)
    assert "copies" in _status(answer, 413, "RequestEntityTooLarge")["message"]
    assert list(client.get(f"{VD}/vd1").json()["spec"]) == ["persistentVolumeClaim"]


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    manifest = json.dumps(disk()).encode()
    body = manifest + b" " * (MAX_BODY_BYTES + 1 - len(manifest))
    answer = client.post(VD, content=body)
    assert str(MAX_BODY_BYTES) in _status(answer, 413, "RequestEntityTooLarge")["message"]
    assert client.post(VD, content=body[:MAX_BODY_BYTES]).status_code == 201


def test_a_chunked_body_over_the_limit_is_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(2 * MAX_BODY_BYTES // 65536):
            yield b" " * 65536

    _status(client.post(VD, content=chunks()), 413, "RequestEntityTooLarge")


def test_an_object_over_the_size_limit_is_413_and_not_stored(client: TestClient) -> None:
    big = disk("big")
    big["metadata"]["annotations"] = {"a": "x" * MAX_OBJECT_BYTES}
    answer = client.post(VD, json=big)
    assert "object" in _status(answer, 413, "RequestEntityTooLarge")["message"]
    assert client.get(f"{VD}/big").status_code == 404
    small = client.post(VD, json=disk("big")).json()
    grown = {"metadata": {"annotations": {"a": "x" * MAX_OBJECT_BYTES}}}
    answer = client.patch(f"{VD}/big", content=json.dumps(grown), headers=MERGE)
    _status(answer, 413, "RequestEntityTooLarge")
    assert client.get(f"{VD}/big").json() == small


def test_too_many_json_patch_operations_are_413(client: TestClient) -> None:
    client.post(VD, json=disk())
    operations = [{"op": "test", "path": "/kind", "value": "VirtualDisk"}] * 10001
    answer = client.patch(f"{VD}/vd1", content=json.dumps(operations), headers=JSON_PATCH)
    assert "10000" in _status(answer, 413, "RequestEntityTooLarge")["message"]


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"manager": "m" * 129, "operation": "Apply"}, "metadata.managedFields[0].manager"),
        ({"manager": "m\n", "operation": "Apply"}, "metadata.managedFields[0].manager"),
        ({"manager": "m", "operation": "Apply", "bogus": {"x": 1}}, "bogus"),
        ({"manager": "m", "operation": "Apply", "subresource": "s" * 257}, "subresource"),
        ({"manager": "m", "operation": "Update", "time": "yesterday"}, "time"),
        ({"manager": ["m"], "operation": "Update"}, "metadata.managedFields[0].manager"),
    ],
)
def test_managed_fields_entries_are_checked(client: TestClient, entry: dict, field: str) -> None:
    manifest = disk()
    manifest["metadata"]["managedFields"] = [entry]
    body = _status(client.post(VD, json=manifest), 422, "Invalid")
    assert any(field in cause["field"] for cause in body["details"]["causes"]), body


@pytest.mark.parametrize(
    "entry",
    [
        {"manager": "m", "operation": "Delete"},
        {"manager": "m", "operation": "Apply", "fieldsType": "FieldsV2"},
        {"manager": "m", "operation": "Apply", "fieldsV1": {"f:a": {"f:b": 1}}},
        {"manager": "m", "operation": "Apply", "fieldsV1": {"a": {}}},
    ],
    ids=["operation", "fieldsType", "fieldsV1-value", "fieldsV1-key"],
)
def test_managed_fields_kubernetes_cannot_decode_are_not_stored(
    client: TestClient, entry: dict
) -> None:
    manifest = disk()
    manifest["metadata"]["managedFields"] = [entry]
    created = client.post(VD, json=manifest, headers={"User-Agent": ""})
    assert created.status_code == 201, created.text
    assert "managedFields" not in created.json()["metadata"]
    applied = {"spec": {"persistentVolumeClaim": {"size": "1Gi"}}}
    owned = client.patch(f"{VD}/vd1", content=json.dumps(applied), headers=MERGE)
    kept = owned.json()["metadata"]["managedFields"]
    updated = {**owned.json(), "metadata": {**owned.json()["metadata"], "managedFields": [entry]}}
    answer = client.put(f"{VD}/vd1", json=updated, headers={"User-Agent": ""})
    assert answer.status_code == 200, answer.text
    assert answer.json()["metadata"]["managedFields"] == kept


def test_managed_fields_entries_as_kubernetes_writes_them_are_taken(client: TestClient) -> None:
    manifest = disk()
    entry = {
        "manager": "kubectl-client-side-apply",
        "operation": "Update",
        "apiVersion": "diskferry.io/v1alpha1",
        "time": "2026-01-02T03:04:05Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:persistentVolumeClaim": {"f:size": {}}}, ".": {}},
    }
    manifest["metadata"]["managedFields"] = [entry]
    answer = client.post(VD, json=manifest, headers={"User-Agent": ""})
    assert answer.status_code == 201, answer.text
    assert answer.json()["metadata"]["managedFields"] == [entry]


def _varint(value: int) -> bytes:
    out = b""
    while True:
        low, value = value & 0x7F, value >> 7
        if not value:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _field(number: int, wire: int, payload: bytes) -> bytes:
    if wire == 0:
        return _varint(number << 3) + payload
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_a_protobuf_field_of_the_wrong_wire_type_is_400(client: TestClient) -> None:
    type_meta = _field(1, 2, b"v1") + _field(2, 2, b"Secret")
    name_as_a_number = _field(1, 0, _varint(1 << 40))  # read as a string: a TiB of zeros
    secret = _field(1, 2, name_as_a_number)
    body = b"k8s\x00" + _field(1, 2, type_meta) + _field(2, 2, secret)
    protobuf = {"Content-Type": "application/vnd.kubernetes.protobuf"}
    _status(client.post(SECRETS, content=body, headers=protobuf), 400, "BadRequest")
    bad_text = b"k8s\x00" + _field(1, 2, type_meta) + _field(2, 2, _field(3, 2, b"\xff\xfe"))
    _status(client.post(SECRETS, content=bad_text, headers=protobuf), 400, "BadRequest")


def test_a_good_token_still_passes(server: ApiServer) -> None:
    with TestClient(server.app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        assert c.get(VD).status_code == 200
