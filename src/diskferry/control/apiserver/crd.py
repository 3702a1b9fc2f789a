"""CustomResourceDefinitions of the diskferry.io kinds, their schemas made from the models."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml

from diskferry.control.resources.kinds import Column, KindInfo, Registry
from diskferry.control.resources.model import GROUP
from diskferry.control.resources.noeffect import NO_EFFECT

Schema = dict[str, Any]

DROPPED = ("title", "$defs", NO_EFFECT)  # a field with no effect says so in its description
TOP_LEVEL: Schema = {
    "apiVersion": {"type": "string", "description": "The versioned schema of this object."},
    "kind": {"type": "string", "description": "The kind of this object."},
    "metadata": {"type": "object"},
}


def _children(node: Schema, change: Callable[[Schema], Schema]) -> Schema:
    """`node` with `change` applied to each schema nested in it, one level down."""
    out = dict(node)
    if "properties" in node:
        out["properties"] = {name: change(value) for name, value in node["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            out[key] = change(node[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in node:
            out[key] = [change(branch) for branch in node[key]]
    return out


def _inline(node: Schema, defs: dict[str, Schema]) -> Schema:
    """`node` with every `$ref` replaced by its definition, and single `allOf`s merged."""
    node = dict(node)
    ref = node.pop("$ref", None)
    if ref is not None:
        node = {**defs[ref.rsplit("/", 1)[-1]], **node}
    if len(node.get("allOf", ())) == 1:
        node = {**node.pop("allOf")[0], **node}
    if "$ref" in node or "allOf" in node:
        return _inline(node, defs)
    return _children(node, lambda child: _inline(child, defs))


def _unwrapped(text: str) -> str:
    """`text` with each paragraph on one line: a docstring's line breaks are its source's, and
    kubectl wraps descriptions itself."""
    paragraphs = (" ".join(p.split()) for p in text.split("\n\n"))
    return "\n\n".join(p for p in paragraphs if p)


def _structural(node: Schema) -> Schema:
    """`node` as a structural schema: a type at every level, no nulls, titles or consts."""
    branches = node.get("anyOf")
    if branches is not None:
        kept = [branch for branch in branches if branch.get("type") != "null"]
        if len(kept) == 1:
            node = {**kept[0], **{k: v for k, v in node.items() if k != "anyOf"}}
        else:
            node = {**node, "anyOf": kept}
    node = {key: value for key, value in node.items() if key not in DROPPED}
    if isinstance(node.get("description"), str):
        node["description"] = _unwrapped(node["description"])
    if node.get("default", 0) is None:
        node.pop("default")
    if "const" in node:
        node["enum"] = [node.pop("const")]
    extra = node.get("additionalProperties")
    if extra is False:
        node.pop("additionalProperties")
    elif extra is True or extra == {}:
        node.pop("additionalProperties")
        node["x-kubernetes-preserve-unknown-fields"] = True
    if not node.keys() - {"description", "default"}:
        node["x-kubernetes-preserve-unknown-fields"] = True
    return _children(node, _structural)


def _with_conditions(node: Schema, declared: Mapping[str, str]) -> Schema:
    """`node` (an object's schema) with the description of `status.conditions` naming the
    condition types the kind `declared`, each with what it means."""
    status = node["properties"].get("status")
    field = (status or {}).get("properties", {}).get("conditions")
    if field is None or not declared:
        return node
    types = [f"{kind}: {meaning}" for kind, meaning in declared.items()]
    text = "\n\n".join(
        [
            field.get("description", ""),
            "Each condition type the kind carries, and what it means:",
            *types,
        ]
    )
    conditions = {**field, "description": text.strip()}
    status = {**status, "properties": {**status["properties"], "conditions": conditions}}
    return {**node, "properties": {**node["properties"], "status": status}}


def openapi_schema(info: KindInfo) -> Schema:
    """The OpenAPI v3 structural schema of `info`'s objects, as a CRD's `openAPIV3Schema`, its
    `status.conditions` described with the condition types the kind declares.

    `metadata` is `{type: object}`, as in every CRD: the API server knows ObjectMeta itself.
    """
    schema = info.model.model_json_schema(by_alias=True, mode="validation")
    out = _structural(_inline(schema, schema.get("$defs", {})))
    out = _with_conditions(out, info.model.CONDITIONS)
    own = {name: value for name, value in out["properties"].items() if name not in TOP_LEVEL}
    out["properties"] = {**TOP_LEVEL, **own}
    out["required"] = [name for name in out.get("required", []) if name not in TOP_LEVEL]
    if not out["required"]:
        out.pop("required")
    return out


def _column(column: Column) -> dict[str, Any]:
    out: dict[str, Any] = {"name": column.name, "type": column.type, "jsonPath": column.json_path}
    if column.priority:
        out["priority"] = column.priority
    if column.description:
        out["description"] = column.description
    return out


def crd(info: KindInfo) -> Schema:
    """The CustomResourceDefinition (apiextensions.k8s.io/v1) of `info`'s kind."""
    names: dict[str, Any] = {
        "kind": info.kind,
        "listKind": f"{info.kind}List",
        "plural": info.plural,
        "singular": info.singular,
    }
    if info.short_names:
        names["shortNames"] = list(info.short_names)
    if info.categories:
        names["categories"] = list(info.categories)
    version: dict[str, Any] = {
        "name": info.version,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(info)},
    }
    if info.has_status:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = [_column(c) for c in info.columns]
    if info.field_selectors:
        version["selectableFields"] = [{"jsonPath": f".{path}"} for path in info.field_selectors]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{info.plural}.{info.group}"},
        "spec": {
            "group": info.group,
            "names": names,
            "scope": "Namespaced" if info.namespaced else "Cluster",
            "versions": [version],
        },
    }


def crds(registry: Registry, group: str = GROUP) -> list[dict[str, Any]]:
    """The CRDs of every kind `registry` serves in `group`."""
    return [crd(info) for info in registry.kinds if info.group == group]


def crds_yaml(documents: list[dict[str, Any]]) -> str:
    """CRDs as one multi-document YAML text, each field in the order Kubernetes writes it."""
    return yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True)
