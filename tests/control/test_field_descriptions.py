"""Every field of every kind has a description, and it reaches each face: the CRDs, the API's
/openapi/v3 and /openapi/v2 documents, and `kubectl explain` against a running daemon."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from api_support import client, server
from daemon_support import Served, kubectl, start_daemon
from fastapi.testclient import TestClient
from pydantic import BaseModel

from diskferry.control.apiserver.crd import TOP_LEVEL, crd, crds, openapi_schema
from diskferry.control.resources.registry import REGISTRY

__all__ = ["client", "server"]

CUSTOM = sorted(c["spec"]["names"]["kind"] for c in crds(REGISTRY))
ROOT_METADATA = ".metadata"
CONDITIONS = ".status.conditions"
"""A field whose schema adds, after its own description, the condition types of its kind."""
"""A CRD's `metadata` may hold nothing but `type: object` (kube-apiserver refuses a
description there and describes ObjectMeta itself); the API's documents describe it."""


def undescribed(node: dict[str, Any], path: str = "") -> Iterator[str]:
    """The path of each field under `node` (through properties, items and additionalProperties)
    whose schema has no description."""
    for name, child in (node.get("properties") or {}).items():
        here = f"{path}.{name}"
        if not child.get("description"):
            yield here
        yield from undescribed(child, here)
    if isinstance(node.get("items"), dict):
        yield from undescribed(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from undescribed(node["additionalProperties"], f"{path}{{}}")


def descriptions(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, str]]:
    """Each field's path under `node` and its description."""
    for name, child in (node.get("properties") or {}).items():
        here = f"{path}.{name}"
        yield here, child.get("description") or ""
        yield from descriptions(child, here)
    for key, mark in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            yield from descriptions(node[key], f"{path}{mark}")


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's type holds: itself, or inside a list, a map or a union."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models(arg)]


def _object(node: dict[str, Any]) -> dict[str, Any] | None:
    """The object schema a field's schema holds: itself, or its items' or its values'."""
    while node is not None and "properties" not in node:
        node = node.get("items") or node.get("additionalProperties") or None
    return node


def own_descriptions(
    model: type[BaseModel], schema: dict[str, Any], path: str = ""
) -> Iterator[tuple[str, str, str]]:
    """Each field of `model` that has a description of its own: its path, that description
    and the one its schema shows (apiVersion, kind and metadata, the API's own, left out)."""
    for name, info in model.model_fields.items():
        key = info.alias or name
        if not path and key in TOP_LEVEL:
            continue
        node = schema["properties"][key]
        here = f"{path}.{key}"
        if info.description:
            yield here, info.description, node.get("description") or ""
        inner = _object(node)
        for sub in _models(info.annotation):
            if inner is not None:
                yield from own_descriptions(sub, inner, here)


def field_at(schema: dict[str, Any], path: str) -> dict[str, Any]:
    """The schema of the field at the dotted `path` as kubectl explain names it, through
    arrays (`status.includedVolumes.diskTarget`)."""
    field, node = schema, schema
    for part in path.split("."):
        field = node["properties"][part]
        node = field.get("items", field)
    return field


@pytest.mark.parametrize("kind", CUSTOM)
def test_every_field_of_a_crd_has_a_description(kind: str) -> None:
    made = crd(REGISTRY.by_kind(kind))
    schema = made["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    missing = [path for path in undescribed(schema) if path != ROOT_METADATA]
    assert not missing, f"{kind}: no description at {missing}"


@pytest.mark.parametrize("kind", [info.kind for info in REGISTRY.kinds])
def test_a_fields_own_description_is_the_one_its_schema_shows(kind: str) -> None:
    info = REGISTRY.by_kind(kind)
    lost = [
        path
        for path, wanted, shown in own_descriptions(info.model, openapi_schema(info))
        if wanted.split() != (shown.split("\n\n")[0] if path == CONDITIONS else shown).split()
    ]
    assert not lost, f"{kind}: the schema does not show the field's description at {lost}"


def test_a_description_keeps_each_paragraph_on_one_line() -> None:
    broken = [
        f"{info.kind}{path}"
        for info in REGISTRY.kinds
        for path, text in descriptions(openapi_schema(info))
        if "\n" in text.replace("\n\n", "")
    ]
    assert not broken, f"a line break inside a paragraph at {broken}"


def test_every_field_in_openapi_v3_has_a_description(client: TestClient) -> None:
    missing = []
    for key, where in client.get("/openapi/v3").json()["paths"].items():
        doc = client.get(where["serverRelativeURL"]).json()
        for name, schema in doc["components"]["schemas"].items():
            missing += [f"{key} {name}{path}" for path in undescribed(schema)]
    assert not missing, f"no description at {missing}"


def test_every_field_in_openapi_v2_has_a_description(client: TestClient) -> None:
    doc = client.get("/openapi/v2", headers={"Accept": "application/json"}).json()
    missing = [
        f"{name}{path}"
        for name, schema in doc["definitions"].items()
        for path in undescribed(schema)
    ]
    assert not missing, f"no description at {missing}"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A daemon without controllers, for kubectl to read its OpenAPI documents."""
    base = tmp_path_factory.mktemp("explain")
    served = start_daemon(base / "data", base / "daemon.log")
    yield served
    assert served.stop() == 0


@pytest.mark.parametrize(
    ("resource", "kind", "path"),
    [
        ("vd", "VirtualDisk", "spec.persistentVolumeClaim.size"),
        ("backups", "Backup", "spec.storageLocation"),
        ("vm", "VirtualMachine", "status.phase"),
        ("vmexport", "VirtualMachineExport", "status.links.external.cert"),
        ("vmbackup", "VirtualMachineBackup", "status.includedVolumes.diskTarget"),
        ("vd", "VirtualDisk", "metadata"),
    ],
)
def test_kubectl_explain_shows_a_deep_fields_description(
    daemon: Served, resource: str, kind: str, path: str
) -> None:
    doc = json.loads(kubectl(daemon, "get", "--raw", "/openapi/v3/apis/diskferry.io/v1alpha1"))
    schema = doc["components"]["schemas"][f"io.diskferry.v1alpha1.{kind}"]
    description = field_at(schema, path).get("description")
    assert description, f"{kind}.{path} has no description"
    shown = kubectl(daemon, "explain", f"{resource}.{path}")
    assert f"FIELD: {path.rsplit('.', 1)[-1]}" in shown
    assert " ".join(description.split()) in " ".join(shown.split()), shown
