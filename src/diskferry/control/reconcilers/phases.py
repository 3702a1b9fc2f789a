"""Phase changes: the status written once, with the `Ready` condition, and an Event for each."""

from __future__ import annotations

from typing import Any, TypeVar

from diskferry.control.model import Resource
from diskferry.control.reconcilers.progress import unchanged
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import set_condition

M = TypeVar("M", bound=Resource)
READY = "Ready"
FAILED = "Failed"
DEGRADED = "Degraded"


def status_of(obj: Resource) -> dict[str, Any]:
    """The object's status as API values."""
    return obj.to_json().get("status") or {}


def transition(
    client: Client,
    obj: M,
    phase: str,
    reason: str,
    message: str,
    fields: dict[str, Any] | None = None,
    ready: bool | None = None,
) -> M:
    """Set `phase` and `fields` in the status, the `Ready` condition after them (True when
    `ready`, which is by default whether the phase is Ready), and record an Event when the
    phase changes (a Warning for Failed and Degraded); nothing when all is so already."""
    status = status_of(obj)
    wanted = {"phase": phase, **(fields or {}), "observedGeneration": obj.metadata.generation}
    ready = phase == READY if ready is None else ready
    before = next((c for c in status.get("conditions") or [] if c.get("type") == READY), None)
    if unchanged(status, wanted) and before and before.get("reason") == reason:
        return obj
    conditions = set_condition(
        status.get("conditions") or [], READY, ready, reason, message, obj.metadata.generation
    )
    updated = client.patch_status(obj, {**wanted, "conditions": conditions})
    if status.get("phase") != phase:
        client.event(obj, "Warning" if phase in (FAILED, DEGRADED) else "Normal", reason, message)
    return updated


def update_fields(client: Client, obj: M, fields: dict[str, Any]) -> M:
    """Write `fields` into the status only when one of them changed."""
    if unchanged(status_of(obj), fields):
        return obj
    return client.patch_status(obj, fields)
