"""Velero's kinds against their models: every field of Velero's types (as tests/anchors/FIELDS.md
lists them) is in the model's schema with a description, those with no effect here say why,
and Velero's samples pass admission unchanged but for apiVersion."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic import BaseModel

from diskferry.control.apiserver.crd import openapi_schema
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.core import NAMESPACES
from diskferry.control.resources.noeffect import reason_of
from diskferry.control.resources.registry import REGISTRY

ANCHORS = Path(__file__).parents[1] / "anchors"
KINDS = (
    "BackupStorageLocation",
    "Backup",
    "Restore",
    "Schedule",
    "DataUpload",
    "DataDownload",
)
ROW = re.compile(r"^\| `([^`]+)` \|")
NO_EFFECT_SAID = re.compile(r"Accepted, with no effect here: \S.+\.$")


def velero_fields(kind: str) -> list[str]:
    """The field paths FIELDS.md lists for `kind` (Velero's type), in its table's order."""
    text = (ANCHORS / "FIELDS.md").read_text()
    section = text.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for line in section.splitlines() if (m := ROW.match(line))]


def schema_at(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The schema of the field at `path` (`spec.hooks.resources[].name`), None when absent."""
    node = schema
    for part in path.split("."):
        arrays = part.count("[]")
        node = (node.get("properties") or {}).get(part.replace("[]", ""))
        if node is None:
            return None
        for _ in range(arrays):
            node = node.get("items")
            if node is None:
                return None
    return node


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_of_velero_is_in_the_schema_with_a_description(kind: str) -> None:
    schema = openapi_schema(REGISTRY.by_kind(kind))
    fields = velero_fields(kind)
    assert len(fields) > 20
    missing = [path for path in fields if schema_at(schema, path) is None]
    assert not missing, f"{kind} lacks {missing}"
    undescribed = [
        path
        for path in fields
        if path not in ("spec", "status") and not schema_at(schema, path).get("description")
    ]
    assert not undescribed, f"{kind}: no description for {undescribed}"


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("Backup", "spec.volumeSnapshotLocations"),
        ("Backup", "spec.csiSnapshotTimeout"),
        ("Backup", "spec.defaultVolumesToFsBackup"),
        ("Backup", "spec.uploaderConfig.parallelFilesUpload"),
        ("Restore", "spec.preserveNodePorts"),
        ("Restore", "spec.restoreStatus"),
        ("Schedule", "spec.template.volumeSnapshotLocations"),
        ("DataUpload", "spec.csiSnapshot"),
    ],
)
def test_a_field_with_no_effect_says_why(kind: str, path: str) -> None:
    field = schema_at(openapi_schema(REGISTRY.by_kind(kind)), path)
    assert field is not None, path
    assert NO_EFFECT_SAID.search(field["description"]), field


def samples() -> list[Path]:
    return sorted((ANCHORS / "velero").glob("*.yaml"))


@pytest.mark.parametrize("sample", samples(), ids=lambda p: p.name)
def test_each_velero_sample_is_admitted_unchanged(sample: Path) -> None:
    doc = yaml.safe_load(sample.read_text())
    info = REGISTRY.by_kind(doc["kind"])
    with tempfile.TemporaryDirectory() as scratch:
        service = ObjectService(Path(scratch) / "state.db", REGISTRY)
        try:
            namespace = doc["metadata"].get("namespace", "default")
            if namespace != "default":
                service.create(NAMESPACES, None, {"metadata": {"name": namespace}})
            stored, _ = service.create(info, namespace, doc, field_validation="Strict")
        finally:
            service.close()
    assert stored["kind"] == doc["kind"]


def no_effect_fields(model: type[BaseModel], seen: set[type] | None = None) -> list[tuple]:
    """Every field with no effect in `model` and the models nested in it: (model, name, info)."""
    seen = seen if seen is not None else set()
    if model in seen:
        return []
    seen.add(model)
    found = []
    for name, info in model.model_fields.items():
        if reason_of(info.json_schema_extra):
            found.append((model.__name__, name, info))
        for nested in _models(info.annotation):
            found += no_effect_fields(nested, seen)
    return found


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models(arg)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_field_with_no_effect_is_never_required(kind: str) -> None:
    fields = no_effect_fields(REGISTRY.by_kind(kind).model)
    assert fields, kind
    required = [(model, name) for model, name, info in fields if info.is_required()]
    assert not required
