"""An object's JSON checked against its kind's model: every error named by its field's path."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import ValidationError

from diskferry.control.errors import InvalidError
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import Resource

FieldValidation = Literal["Strict", "Warn", "Ignore"]
UNKNOWN = "extra_forbidden"


def field_path(loc: Sequence[int | str]) -> str:
    """A pydantic location as Kubernetes writes a field path: `spec.volumes[0].name`."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif "[" in part or "(" in part:
            continue
        else:
            path += f".{part}" if path else str(part)
    return path


def _drop(data: Any, loc: Sequence[int | str]) -> None:
    """Remove the field at `loc` from `data`, if it is still there."""
    *parents, last = loc
    for part in parents:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(data, dict):
        data.pop(last, None)


def _invalid(info: KindInfo, name: str | None, error: ValidationError) -> InvalidError:
    causes = []
    for item in error.errors(include_input=False, include_url=False):
        path = field_path(item["loc"])
        if item["type"] == UNKNOWN:
            reason, message = "FieldValueNotSupported", "unknown field"
        else:
            reason, message = "FieldValueInvalid", item["msg"]
        causes.append({"reason": reason, "field": path, "message": message})
    listed = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
    return InvalidError(
        f'{info.group_kind} "{name or ""}" is invalid: {listed}',
        kind=info.kind,
        name=name,
        causes=causes,
    )


def validate(
    info: KindInfo, data: dict[str, Any], unknown: FieldValidation = "Strict"
) -> tuple[Resource, list[str]]:
    """`data` as `info`'s model, and the warnings to give; InvalidError names each bad field.

    Unknown fields are refused (`Strict`), or dropped with a warning each (`Warn`) or
    silently (`Ignore`), as Kubernetes' `fieldValidation` says.
    """
    name = (data.get("metadata") or {}).get("name") if isinstance(data, dict) else None
    warnings: list[str] = []
    dropped: set[tuple[int | str, ...]] = set()
    while True:
        try:
            return info.model.model_validate(data), warnings
        except ValidationError as error:
            # a schema checked in steps (a cluster kind's) names its unknown fields a few at a
            # time: drop them until none is left, or one dropped before comes back
            extra = [tuple(e["loc"]) for e in error.errors() if e["type"] == UNKNOWN]
            again = dropped.intersection(extra)
            if unknown == "Strict" or again or not extra or len(extra) != error.error_count():
                raise _invalid(info, name, error) from None
        for loc in extra:
            _drop(data, loc)
        dropped.update(extra)
        if unknown == "Warn":
            warnings += [f'unknown field "{field_path(loc)}"' for loc in extra]
