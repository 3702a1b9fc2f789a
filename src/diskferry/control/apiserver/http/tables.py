"""`meta.k8s.io/v1` Tables of a kind's print columns, with ages written as kubectl writes them."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from diskferry.control.apiserver.http.jsonpath import evaluate
from diskferry.control.resources.kinds import Column, KindInfo

NAME_COLUMN = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": "Name must be unique within a namespace.",
    "priority": 0,
}


def human_duration(seconds: float) -> str:
    """A duration as Kubernetes' `duration.HumanDuration` writes it: 45s, 3m20s, 5h, 12d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


def _age(value: Any, now: datetime) -> str | None:
    try:
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return human_duration((now - when).total_seconds())


def cell(column: Column, obj: dict[str, Any], now: datetime) -> Any:
    """The value of `column` for `obj` as a Table cell; the column's default when the path
    selects nothing."""
    values = evaluate(column.json_path, obj)
    if not values or values[0] is None:
        return column.default
    value = values[0]
    if column.type == "date":
        return _age(value, now)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    if column.type in ("integer", "number", "boolean"):
        return value
    return str(value)


def _definition(column: Column) -> dict[str, Any]:
    return {
        "name": column.name,
        "type": column.type,
        "format": "",
        "description": column.description or f"{column.name} of the object.",
        "priority": column.priority,
    }


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "Object":
        return obj
    if include == "None":
        return None
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    info: KindInfo,
    objects: list[dict[str, Any]],
    *,
    include_object: str = "Metadata",
    headers: bool = True,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Table of `objects` with a Name column and `info`'s print columns."""
    now = datetime.now(UTC)
    rows = []
    for obj in objects:
        name = info.row_name(obj) if info.row_name else obj.get("metadata", {}).get("name")
        cells = [name, *(cell(c, obj, now) for c in info.columns)]
        row: dict[str, Any] = {"cells": cells}
        embedded = _row_object(obj, include_object)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    definitions = [NAME_COLUMN, *(_definition(c) for c in info.columns)] if headers else []
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata or {},
        "columnDefinitions": definitions,
        "rows": rows,
    }
