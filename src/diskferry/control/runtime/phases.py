"""Phase changes: the status written once, with the `Ready` condition, and an Event for each;
the mark of a disk's or image's work beginning, from which on its spec is fixed; and the
reasons the phases of several kinds share."""

from __future__ import annotations

from typing import Any, TypeVar

from diskferry.control.resources.model import IN_USE, READY, Reason, Resource
from diskferry.control.resources.updates import started
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import declared, set_condition
from diskferry.control.runtime.progress import unchanged

M = TypeVar("M", bound=Resource)
FAILED = "Failed"
PENDING = Reason("Pending")
PROVISIONING = Reason("Provisioning")
DEGRADED = Reason("Degraded")
STARTING = Reason("Starting")
TERMINATING = Reason("Terminating")
STILL_IN_USE = Reason(IN_USE)
"""The reason of an object whose deletion waits for those that use it."""


def status_of(obj: Resource) -> dict[str, Any]:
    """The object's status as API values."""
    return obj.to_json().get("status") or {}


Condition = tuple[bool, str, str]
"""A condition's status, reason and message."""


def transition(
    client: Client,
    obj: M,
    phase: str,
    reason: str,
    message: str,
    fields: dict[str, Any] | None = None,
    ready: bool | None = None,
    conditions: dict[str, Condition | None] | None = None,
) -> M:
    """Set `phase` and `fields` in the status, the `Ready` condition after them (True when
    `ready`, which is by default whether the phase is Ready) and the other `conditions` (each
    type set, or removed when None; each a type the kind declares), and record an Event when
    the phase changes (a Warning for Failed and Degraded), before the status that shows it;
    nothing when all is so already."""
    status = status_of(obj)
    wanted = {"phase": phase, **(fields or {}), "observedGeneration": obj.metadata.generation}
    ready = phase == READY if ready is None else ready
    found = status.get("conditions") or []
    others = found
    for kind, value in (conditions or {}).items():
        declared(type(obj), kind)
        others = (
            [c for c in others if c.get("type") != kind]
            if value is None
            else set_condition(obj, others, kind, *value, obj.metadata.generation)
        )
    before = next((c for c in found if c.get("type") == READY), None)
    same_others = _shown(others) == _shown(found)
    if unchanged(status, wanted) and before and before.get("reason") == reason and same_others:
        return obj
    conditions_now = set_condition(
        obj, others, READY, ready, reason, message, obj.metadata.generation
    )
    if status.get("phase") != phase:
        # before the status: whoever sees the new phase finds its Event too
        client.event(obj, "Warning" if phase in (FAILED, DEGRADED) else "Normal", reason, message)
    return client.patch_status(obj, {**wanted, "conditions": conditions_now})


def _shown(conditions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What of each condition but Ready a user reads: its type, status, reason, message."""
    keys = ("type", "status", "reason", "message")
    return [tuple(c.get(k) for k in keys) for c in conditions if c.get("type") != READY]


def update_fields(client: Client, obj: M, fields: dict[str, Any]) -> M:
    """Write `fields` into the status only when one of them changed."""
    if unchanged(status_of(obj), fields):
        return obj
    return client.patch_status(obj, fields)


def begin(client: Client, obj: M, message: str, fields: dict[str, Any]) -> M | None:
    """The object, Provisioning with `fields`, before its work (a claim, a worker) starts: the
    API fixes its spec from then on (see `resources.updates`). None when its spec changed
    before the mark was written: it is Pending again, for the next reconcile (the change
    queued one) to start from the new spec."""
    if started(obj) is not None:
        return update_fields(client, obj, fields)
    marked = transition(client, obj, PROVISIONING, PROVISIONING, message, fields)
    current = client.get(type(obj), obj.metadata.namespace, obj.metadata.name or "")
    if current is not None and current.metadata.generation == obj.metadata.generation:
        return marked
    if current is not None:
        transition(client, current, PENDING, PENDING, "its spec changed before its work began")
    return None
