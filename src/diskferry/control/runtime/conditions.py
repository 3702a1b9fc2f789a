"""Conditions in the Kubernetes shape: one per type, its transition time kept while unchanged,
and only of a type the object's kind declares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from diskferry.control.resources.model import Resource


def now() -> str:
    """The time as the API writes it: RFC 3339 in UTC, to the second."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def declared(model: type[Resource], type_: str) -> str:
    """`type_`, a condition type `model`'s kind declares; ValueError for one it does not."""
    if type_ not in model.CONDITIONS:
        listed = ", ".join(model.CONDITIONS) or "none"
        raise ValueError(
            f"{model.__name__} declares no condition {type_!r} (it declares {listed}): add it "
            "to the kind's CONDITIONS with what it means"
        )
    return type_


def set_condition(
    obj: Resource,
    conditions: list[dict[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str = "",
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """`conditions` (API dicts) of `obj` with the one of `type_` set, a type its kind declares;
    others kept as they are."""
    declared(type(obj), type_)
    wanted = "True" if status else "False"
    before = next((c for c in conditions if c.get("type") == type_), None)
    changed = before is None or before.get("status") != wanted
    condition = {
        "type": type_,
        "status": wanted,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now() if changed else before.get("lastTransitionTime", now()),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return [c if c.get("type") != type_ else condition for c in conditions] + (
        [condition] if before is None else []
    )


def find(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of `type_`, None when there is none."""
    return next((c for c in conditions if c.get("type") == type_), None)
