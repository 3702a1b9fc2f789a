"""Fields taken from an anchor's API (Deckhouse, KubeVirt, Velero) that have no effect here.

Such a field is accepted, so that the anchor's manifests apply unchanged, and never silently
dropped: its schema carries why it has no effect (NO_EFFECT), its description says so, and
the API answers a write that sets it with a `Warning` header naming the field and the reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, Field

Location = tuple[str | int, ...]

NO_EFFECT = "x-diskferry-no-effect"
"""The schema key whose value says why a field has no effect here."""


def no_effect(why: str, description: str, **field_args: Any) -> Any:
    """A pydantic Field accepted for the anchor's sake: `description` says what the anchor
    means by it, `why` why diskferry does nothing with it."""
    return Field(
        description=f"{description} Accepted, with no effect here: {why}.",
        json_schema_extra={NO_EFFECT: why},
        **field_args,
    )


def reason_of(extra: Any) -> str | None:
    """Why a field with this `json_schema_extra` has no effect here, None when it has one."""
    return extra.get(NO_EFFECT) if isinstance(extra, dict) else None


def _set(model: BaseModel, path: str, at: Location) -> Iterator[tuple[str, Location, str]]:
    """Each field with no effect that holds other than its default in `model` (found at `path`,
    JSON location `at`): its path as Kubernetes writes one, its JSON location, and why."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        key = info.alias or name
        here, where = f"{path}.{key}" if path else key, (*at, key)
        why = reason_of(info.json_schema_extra)
        if why is not None and value != info.get_default(call_default_factory=True):
            yield here, where, why
        if isinstance(value, BaseModel):
            yield from _set(value, here, where)
        elif isinstance(value, dict):
            yield from _each(value.items(), here, where)
        elif isinstance(value, list | tuple):
            yield from _each(enumerate(value), here, where)


def _each(
    items: Iterable[tuple[str | int, Any]], path: str, at: Location
) -> Iterator[tuple[str, Location, str]]:
    """What `_set` finds in each model among the items of a list or a map at `path`."""
    for index, item in items:
        if isinstance(item, BaseModel):
            yield from _set(item, f"{path}[{index}]", (*at, index))


def _at(data: Any, location: Location) -> Any:
    """The JSON value at `location` in `data`, None when there is none."""
    for key in location:
        if isinstance(data, dict) and isinstance(key, str):
            data = data.get(key)
        elif isinstance(data, list) and isinstance(key, int) and key < len(data):
            data = data[key]
        else:
            return None
    return data


def warnings(model: BaseModel, new: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    """A warning for each field with no effect that a write sets: other than its default in
    `model` (the object written, `new` its JSON) and changed from `old` (the JSON it replaces,
    None for a new object)."""
    return [
        f"{path}: has no effect here: {why}"
        for path, location, why in _set(model, "", ())
        if old is None or _at(new, location) != _at(old, location)
    ]
