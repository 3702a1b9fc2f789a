"""What tests of manifests share: the example manifests, and where a CRD's schema finds a
document wrong, unknown fields refused as the API server's strict field validation does."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

EXAMPLES = Path(__file__).parents[1] / "examples"


def example_documents() -> list[dict[str, Any]]:
    """Every document of every example manifest."""
    docs = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


def strict(node: dict[str, Any]) -> dict[str, Any]:
    """`node` refusing unknown fields, as the API server's `fieldValidation=Strict` does."""
    node = copy.deepcopy(node)
    stack = [node]
    while stack:
        schema = stack.pop()
        if "properties" in schema and schema is not node["properties"].get("metadata"):
            schema["additionalProperties"] = False
        stack.extend(schema.get("properties", {}).values())
        stack.extend(schema.get(key) for key in ("items",) if key in schema)
    return node


def schema_errors(schema: dict[str, Any], doc: dict[str, Any]) -> list[str]:
    """Where the strict form of a CRD's openAPIV3Schema finds `doc` wrong, as `path: message`."""
    validator = jsonschema.Draft202012Validator(strict(schema))
    return sorted(
        f"{'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(doc)
    )
