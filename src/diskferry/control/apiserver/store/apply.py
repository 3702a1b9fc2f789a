"""Field managers (`metadata.managedFields`, FieldsV1): the fields each manager applied or
changed, conflicts between managers, and fields a manager stops applying removed.

A field is a path of map keys down to a value; a list is one field (atomic), as custom
resources' lists are. A manager owns the fields of its last apply configuration (operation
Apply) and the fields its creates, updates and patches changed (operation Update, per
subresource); applying a field another manager owns, with another value, is a conflict
unless forced, which takes the field from that manager. A field the manager applied before
and applies no more is removed, unless another manager owns it too.
"""

from __future__ import annotations

import copy
from typing import Any

from diskferry.control.errors import ConflictError
from diskferry.control.resources.model import is_fields_v1

Obj = dict[str, Any]
Path = tuple[str, ...]
APPLY = "Apply"
UPDATE = "Update"
FIELDS_TYPE = "FieldsV1"
UNTRACKED_META = (
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
)


def decodable(entries: Any) -> bool:
    """Whether `entries` are managedFields kube-apiserver decodes: objects whose operation is
    Apply or Update, whose fieldsType is FieldsV1 (or none), and whose fieldsV1 is a FieldsV1
    set. Entries it cannot decode it does not refuse: it keeps the object's own instead."""
    return isinstance(entries, list) and all(
        isinstance(entry, dict)
        and entry.get("operation") in (APPLY, UPDATE)
        and entry.get("fieldsType", FIELDS_TYPE) == FIELDS_TYPE
        and is_fields_v1(entry.get("fieldsV1", {}))
        for entry in entries
    )


def _leaves(value: Any, prefix: Path = ()) -> set[Path]:
    if isinstance(value, dict) and value:
        found: set[Path] = set()
        for key, item in value.items():
            found |= _leaves(item, (*prefix, key))
        return found
    return {prefix} if prefix else set()


def _tracked(obj: Obj, with_status: bool, subresource: str | None = None) -> Obj:
    """What of an object managers own: its status alone for the status subresource; else
    all but type, identity, server-set metadata and (with a status subresource) status."""
    if subresource is not None:
        return {subresource: obj.get(subresource)} if subresource in obj else {}
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if with_status:
        body.pop("status", None)
    meta = {k: v for k, v in (body.pop("metadata", None) or {}).items() if k not in UNTRACKED_META}
    if meta:
        body["metadata"] = meta
    return body


def applied_fields(config: Obj, with_status: bool) -> set[Path]:
    """The fields an apply configuration sets."""
    return {p for p in _leaves(_tracked(config, with_status)) if None not in _values(config, p)}


def _values(obj: Obj, path: Path) -> list[Any]:
    """[the value at `path`], [] when there is none."""
    value: Any = obj
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return []
        value = value[key]
    return [value]


def to_fields_v1(paths: set[Path]) -> Obj:
    """Paths as FieldsV1: `{"f:spec": {"f:size": {}}}`."""
    tree: Obj = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    """The paths of a FieldsV1 tree (keys other than `f:` ones, such as `.`, name the map
    itself and are not tracked apart); none for what is no tree."""
    paths: set[Path] = set()
    for key, child in tree.items() if isinstance(tree, dict) else ():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        below = from_fields_v1(child, path) if isinstance(child, dict) else set()
        paths |= below or {path}
    return paths


def _overlap(a: Path, b: Path) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _dotted(path: Path) -> str:
    return "".join(f".{key}" for key in path)


def _remove(obj: Obj, path: Path) -> None:
    node: Any = obj
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(path[-1], None)


def _merge(into: Obj, config: Obj) -> None:
    for key, value in config.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif value is not None:
            into[key] = copy.deepcopy(value)


def apply(
    current: Obj | None,
    config: Obj,
    manager: str,
    *,
    force: bool,
    with_status: bool,
    now: str,
) -> Obj:
    """The object `current` (None: none yet) becomes with `config` applied by `manager`,
    its managedFields included.

    ConflictError (409, a FieldManagerConflict cause per field) when another manager owns
    a field `config` sets to another value, unless `force`.
    """
    base = copy.deepcopy(current) if current is not None else {"metadata": {}}
    entries = copy.deepcopy(base["metadata"].get("managedFields") or [])
    mine = [e for e in entries if e.get("manager") == manager and e.get("operation") == APPLY]
    others = [e for e in entries if e not in mine]
    before = set().union(*(from_fields_v1(e.get("fieldsV1")) for e in mine))
    fields = applied_fields(config, with_status)
    owned = [(e, from_fields_v1(e.get("fieldsV1"))) for e in others]
    conflicts: list[tuple[Obj, Path]] = []
    for entry, paths in owned:
        for path in fields:
            clash = [p for p in paths if _overlap(p, path)]
            if clash and _values(base, path) != _values(config, path):
                conflicts.append((entry, path))
                paths.difference_update(clash)
    if conflicts and not force:
        raise _conflict_error(conflicts)
    kept = set().union(*(paths for _, paths in owned))
    new = base
    for path in before - fields:
        if not any(_overlap(path, p) for p in kept):
            _remove(new, path)
    _merge(new, config)
    previous = [e for e in mine if from_fields_v1(e.get("fieldsV1")) == fields]
    if previous and current is not None and _same(new, current) and not conflicts:
        return copy.deepcopy(current)
    managed = [_entry(e, paths) for e, paths in owned if paths]
    if fields:
        managed.append(
            {
                "manager": manager,
                "operation": APPLY,
                "apiVersion": config.get("apiVersion"),
                "time": now,
                "fieldsType": FIELDS_TYPE,
                "fieldsV1": to_fields_v1(fields),
            }
        )
    new["metadata"]["managedFields"] = managed
    return new


def _same(a: Obj, b: Obj) -> bool:
    """Whether two objects are equal but for their managedFields."""

    def bare(obj: Obj) -> Obj:
        meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
        return {**obj, "metadata": meta}

    return bare(a) == bare(b)


def _entry(entry: Obj, paths: set[Path]) -> Obj:
    return {**entry, "fieldsV1": to_fields_v1(paths)}


def _conflict_error(conflicts: list[tuple[Obj, Path]]) -> ConflictError:
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "{e.get("manager")}" using {e.get("apiVersion")}',
            "field": _dotted(path),
        }
        for e, path in conflicts
    ]
    listed = "\n".join(f"- {c['message']}: {c['field']}" for c in causes)
    count = len(causes)
    plural = "conflict" if count == 1 else "conflicts"
    message = (
        f"Apply failed with {count} {plural}: {causes[0]['message']}: {causes[0]['field']}"
        if count == 1
        else f"Apply failed with {count} {plural}:\n{listed}"
    )
    return ConflictError(message, causes=causes)


def record_update(
    current: Obj | None,
    new: Obj,
    manager: str,
    *,
    subresource: str | None,
    with_status: bool,
    now: str,
) -> None:
    """Give `manager` (operation Update) the fields in which `new` differs from `current`,
    taking them from the other managers; `new`'s managedFields are changed in place."""
    old = _tracked(current or {}, with_status, subresource)
    after = _tracked(new, with_status, subresource)
    changed = {p for p in _leaves(after) if _values(old, p) != _values(after, p)}
    gone = {p for p in _leaves(old) if not _values(after, p)}
    if not changed and not gone:
        return
    meta = new["metadata"]
    entries: list[Obj] = []
    mine: set[Path] = set()
    for entry in meta.get("managedFields") or []:
        paths = from_fields_v1(entry.get("fieldsV1"))
        if _is_update_of(entry, manager, subresource):
            mine |= paths
            continue
        left = {p for p in paths if not any(_overlap(p, q) for q in changed | gone)}
        if left:
            entries.append(_entry(entry, left))
    mine = {p for p in mine if not any(_overlap(p, q) for q in gone)} | changed
    if mine:
        entry = {
            "manager": manager,
            "operation": UPDATE,
            "apiVersion": new.get("apiVersion"),
            "time": now,
            "fieldsType": FIELDS_TYPE,
            "fieldsV1": to_fields_v1(mine),
        }
        entries.append({**entry, "subresource": subresource} if subresource else entry)
    meta["managedFields"] = entries


def _is_update_of(entry: Obj, manager: str, subresource: str | None) -> bool:
    return (
        entry.get("manager") == manager
        and entry.get("operation") == UPDATE
        and entry.get("subresource") == subresource
    )
