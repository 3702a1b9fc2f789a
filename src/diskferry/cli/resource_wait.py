"""Waiting for an object: a phase, a condition, or its deletion, by following its watch."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import typer

from diskferry.base import DiskferryError
from diskferry.cli.daemon_client import DaemonClient, DaemonError, ResourceType

FAILED = "Failed"


@dataclass(frozen=True)
class Want:
    """What `--for` asks: `delete`, `phase=Ready`, `condition=Ready` or `condition=Ready=False`."""

    what: str
    key: str = ""
    value: str = ""

    def __str__(self) -> str:
        if self.what == "delete":
            return "be deleted"
        if self.what == "phase":
            return f"have phase {self.value}"
        return f"have condition {self.key}={self.value}"


def parse_for(text: str) -> Want:
    """The `--for` value, or a usage error."""
    what, _, rest = text.partition("=")
    if what == "delete" and not rest:
        return Want("delete")
    if what == "phase" and rest:
        return Want("phase", value=rest)
    if what == "condition" and rest:
        key, _, value = rest.partition("=")
        return Want("condition", key=key, value=value or "True")
    raise typer.BadParameter(
        f"cannot read {text!r}: use delete, phase=PHASE or condition=TYPE[=STATUS]",
        param_hint="--for",
    )


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    conditions = obj.get("status", {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), None)


def met(obj: dict[str, Any] | None, want: Want) -> bool:
    """Whether `obj` (None once deleted) is as `want` asks."""
    if want.what == "delete" or obj is None:
        return obj is None and want.what == "delete"
    if want.what == "phase":
        return obj.get("status", {}).get("phase") == want.value
    condition = _condition(obj, want.key)
    return condition is not None and condition.get("status") == want.value


def failure(obj: dict[str, Any]) -> str:
    """Why a Failed object failed: the reason and message of its failing condition."""
    conditions = obj.get("status", {}).get("conditions") or []
    failing = [c for c in conditions if c.get("status") != "True" and c.get("message")]
    failing.sort(key=lambda c: c.get("type") != "Ready")
    if failing:
        return f"{failing[0].get('reason') or FAILED}: {failing[0]['message']}"
    return obj.get("status", {}).get("message") or "no reason given"


def _state(obj: dict[str, Any] | None) -> str:
    if obj is None:
        return "it does not exist"
    phase = obj.get("status", {}).get("phase")
    return f"its phase is {phase}" if phase else "it has no phase yet"


def _read(client: DaemonClient, info: ResourceType, namespace: str, name: str) -> dict | None:
    try:
        return client.request("GET", info.path(namespace, name))
    except DaemonError as e:
        if e.code == 404:
            return None
        raise


def wait_for(
    client: DaemonClient,
    info: ResourceType,
    namespace: str,
    name: str,
    want: Want,
    timeout: float,
) -> None:
    """Return once the object is as `want` asks; DiskferryError on a timeout, on Failed, or
    when it is gone while not waited to be."""
    ref = info.ref(name)
    deadline = time.monotonic() + timeout
    current = {"obj": _read(client, info, namespace, name)}
    if current["obj"] is None and want.what != "delete":
        raise DiskferryError(f'{info.plural}.{info.group or "core"} "{name}" not found')

    def relist() -> str:
        current["obj"] = _read(client, info, namespace, name)
        listed = client.request("GET", info.path(namespace), params={"limit": "1"})
        return listed.get("metadata", {}).get("resourceVersion", "")

    def check() -> bool:
        obj = current["obj"]
        if met(obj, want):
            return True
        if obj is None:
            raise DiskferryError(f"{ref} was deleted while waiting for it to {want}")
        if want.what != "delete" and obj.get("status", {}).get("phase") == FAILED:
            raise DiskferryError(f"{ref} failed: {failure(obj)}")
        return False

    if check():
        return
    start = current["obj"]["metadata"].get("resourceVersion", "")
    try:
        for event in client.follow(info.path(namespace), start, relist, deadline=deadline):
            obj = event.get("object")
            if obj is not None and obj.get("metadata", {}).get("name") != name:
                continue
            if event["type"] != "RELISTED":
                current["obj"] = None if event["type"] == "DELETED" else obj
            if check():
                return
    except TimeoutError:
        raise DiskferryError(
            f"timed out after {timeout:g}s waiting for {ref} to {want}: {_state(current['obj'])}"
        ) from None
