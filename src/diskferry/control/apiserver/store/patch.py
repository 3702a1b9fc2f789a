"""Patches as the API takes them: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and
Kubernetes' strategic merge patch for the core kinds."""

from __future__ import annotations

import copy
import json
from typing import Any

from diskferry.control.apiserver.store.values import MAX_DEPTH, depth, loads, too_deep
from diskferry.control.errors import (
    BadRequestError,
    InvalidError,
    RequestEntityTooLargeError,
    UnsupportedMediaTypeError,
)

PATCH_TYPES = {
    "merge": "merge",
    "application/merge-patch+json": "merge",
    "json": "json",
    "application/json-patch+json": "json",
    "strategic": "strategic",
    "application/strategic-merge-patch+json": "strategic",
}
CUSTOM_MEDIA_TYPES = (
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)
# Lists a strategic merge patch merges instead of replacing: by key, or "" for a set of values.
MERGE_KEYS = {
    "metadata.finalizers": "",
    "metadata.ownerReferences": "uid",
    "status.conditions": "type",
}
DIRECTIVE = "$patch"
DELETE_FROM = "$deleteFromPrimitiveList/"
ELEMENT_ORDER = "$setElementOrder/"
RETAIN_KEYS = "$retainKeys"
PATCH = "the patch"
# as kube-apiserver: operations in one JSON patch; and what its copies may add up to, in
# encoded bytes (more than an object may hold would never be stored)
MAX_JSON_PATCH_OPERATIONS = 10_000
MAX_COPIED_BYTES = 3 << 19


def patch_kind(patch_type: str, *, strategic: bool) -> str:
    """The patch kind (merge, json or strategic) a type or content type names.

    UnsupportedMediaTypeError for an unknown type, and for strategic where the kind has no
    strategy (custom resources, as Kubernetes answers).
    """
    kind = PATCH_TYPES.get(patch_type.split(";")[0].strip())
    if kind is None:
        raise UnsupportedMediaTypeError(f"unsupported patch type {patch_type!r}")
    if kind == "strategic" and not strategic:
        raise UnsupportedMediaTypeError(CUSTOM_MEDIA_TYPES)
    return kind


def decode(patch: Any) -> Any:
    """The patch as JSON values, from bytes, text or values already decoded; BadRequestError
    when it is no JSON or is nested too deep."""
    if isinstance(patch, bytes | str):
        return loads(patch, PATCH)
    return patch


def apply(target: dict[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    """`target` with `patch` of `kind` (merge, json, strategic) applied; `target` is untouched."""
    if kind == "json":
        result = json_patch(target, patch)
    elif not isinstance(patch, dict):
        raise BadRequestError("a merge patch must be a JSON object")
    elif kind == "merge":
        result = merge_patch(target, patch)
    else:
        result = strategic_merge_patch(target, patch)
    if not isinstance(result, dict):
        raise InvalidError("the patched object is not a JSON object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merged key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise BadRequestError(f"invalid JSON pointer {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def _index(container: list[Any], part: str, *, adding: bool) -> int:
    if part == "-" and adding:
        return len(container)
    if not part.isdigit() or (len(part) > 1 and part.startswith("0")):
        raise InvalidError(f"invalid array index {part!r}")
    index = int(part)
    if index > len(container) or (index == len(container) and not adding):
        raise InvalidError(f"array index {index} out of range")
    return index


def _parent(doc: Any, parts: list[str]) -> Any:
    for part in parts[:-1]:
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list):
            doc = doc[_index(doc, part, adding=False)]
        else:
            raise InvalidError(f"path /{'/'.join(parts)}: missing {part!r}")
    return doc


def _get(doc: Any, parts: list[str]) -> Any:
    if not parts:
        return doc
    parent, last = _parent(doc, parts), parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, adding=False)]
    raise InvalidError(f"path /{'/'.join(parts)} does not exist")


def _remove(doc: Any, parts: list[str]) -> Any:
    if not parts:
        raise InvalidError("cannot remove the whole document")
    _get(doc, parts)
    parent, last = _parent(doc, parts), parts[-1]
    if isinstance(parent, dict):
        return parent.pop(last)
    return parent.pop(_index(parent, last, adding=False))


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent, last = _parent(doc, parts), parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, adding=True), value)
    else:
        raise InvalidError(f"path /{'/'.join(parts)}: parent is not a container")
    return doc


def _placed(parts: list[str], value: Any) -> Any:
    """`value`, when put at `parts` it is nested MAX_DEPTH deep at most; else the 400."""
    if len(parts) + depth(value) > MAX_DEPTH:
        raise too_deep("the patched object")
    return value


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902: add, remove, replace, move, copy and test, applied in order, all or nothing.

    As kube-apiserver: at most MAX_JSON_PATCH_OPERATIONS operations, and copies of at most
    MAX_COPIED_BYTES in all (each copy may double the object); nothing is nested deeper than
    MAX_DEPTH.
    """
    if not isinstance(operations, list):
        raise BadRequestError("a JSON patch must be a JSON array of operations")
    if len(operations) > MAX_JSON_PATCH_OPERATIONS:
        raise RequestEntityTooLargeError(
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS},"
            f" got {len(operations)}"
        )
    doc = copy.deepcopy(target)
    copied = 0
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise BadRequestError(f"invalid JSON patch operation {op!r}")
        name, parts = op["op"], _pointer(op["path"])
        if name in ("add", "replace", "test") and "value" not in op:
            raise BadRequestError(f"JSON patch {name} at {op['path']} has no value")
        if name == "add":
            doc = _add(doc, parts, copy.deepcopy(_placed(parts, op["value"])))
        elif name == "remove":
            _remove(doc, parts)
        elif name == "replace":
            _placed(parts, op["value"])
            if parts:
                _remove(doc, parts)
            doc = _add(doc, parts, copy.deepcopy(op["value"]))
        elif name == "move":
            source = _pointer(op.get("from"))
            if parts[: len(source)] == source and parts != source:
                raise InvalidError(f"cannot move {op.get('from')} into itself")
            _placed(parts, _get(doc, source))
            doc = _add(doc, parts, _remove(doc, source))
        elif name == "copy":
            value = _placed(parts, _get(doc, _pointer(op.get("from"))))
            copied += len(json.dumps(value, separators=(",", ":")))
            if copied > MAX_COPIED_BYTES:
                raise RequestEntityTooLargeError(
                    f"the JSON patch copies more than {MAX_COPIED_BYTES} bytes"
                )
            doc = _add(doc, parts, copy.deepcopy(value))
        elif name == "test":
            if _get(doc, parts) != op["value"]:
                raise InvalidError(f"test operation at {op['path']} failed")
        else:
            raise BadRequestError(f"unknown JSON patch operation {name!r}")
    return doc


def strategic_merge_patch(target: Any, patch: Any, path: str = "") -> Any:
    """Kubernetes' strategic merge patch over the lists MERGE_KEYS names; other lists replace.

    Honours `$patch: replace|delete`, `$retainKeys` and `$deleteFromPrimitiveList`;
    `$setElementOrder` is accepted and ignored.
    """
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get(DIRECTIVE)
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != DIRECTIVE}
    result = dict(target) if isinstance(target, dict) else {}
    if RETAIN_KEYS in patch:
        result = {k: v for k, v in result.items() if k in _listed(patch, RETAIN_KEYS)}
    for key, value in patch.items():
        if key in (DIRECTIVE, RETAIN_KEYS) or key.startswith(ELEMENT_ORDER):
            continue
        if key.startswith(DELETE_FROM):
            field = key[len(DELETE_FROM) :]
            deleted = _listed(patch, key)
            result[field] = [v for v in _list(result.get(field)) if v not in deleted]
            continue
        where = f"{path}.{key}" if path else key
        if value is None or (isinstance(value, dict) and value.get(DIRECTIVE) == "delete"):
            result.pop(key, None)
        elif isinstance(value, list) and where in MERGE_KEYS:
            result[key] = _merge_list(_list(result.get(key)), value, MERGE_KEYS[where], where)
        else:
            result[key] = strategic_merge_patch(result.get(key), value, where)
    return result


def _listed(patch: dict[str, Any], directive: str) -> list[Any]:
    """The list a directive of the patch gives; BadRequestError when it gives something else."""
    value = patch[directive]
    if not isinstance(value, list):
        raise BadRequestError(f"{directive} must be a list")
    return value


def _list(value: Any) -> list[Any]:
    """A list field of the object, as a list: what is no list counts as none."""
    return value if isinstance(value, list) else []


def _merge_list(target: list[Any], patch: list[Any], key: str, path: str) -> list[Any]:
    if not key:
        return list(target) + [v for v in patch if v not in target]
    merged = [copy.deepcopy(item) for item in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise BadRequestError(f"{path}: every item needs the merge key {key!r}")
        at = next(
            (
                i
                for i, old in enumerate(merged)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get(DIRECTIVE) == "delete":
            if at is not None:
                merged.pop(at)
        elif at is None:
            merged.append(strategic_merge_patch({}, item, path))
        else:
            merged[at] = strategic_merge_patch(merged[at], item, path)
    return merged
