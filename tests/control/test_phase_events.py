"""A phase change's Event is recorded before the status that shows it, so that whoever sees the
new phase (`kubectl wait`, then `kubectl describe`) finds its Event too."""

from __future__ import annotations

from typing import Any

from diskferry.control.resources.model import READY, Resource
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.runtime.phases import FAILED, transition


def _disk(status: dict[str, Any] | None = None) -> VirtualDisk:
    return VirtualDisk.model_validate(
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "metadata": {"name": "d", "namespace": "default", "generation": 1},
            "spec": {"persistentVolumeClaim": {"size": "1Mi"}},
            "status": status or {"phase": "Pending"},
        }
    )


class _Recording:
    """A client that keeps, in order, what was written through it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def event(self, obj: Resource, type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", (type_, reason, message)))

    def patch_status(self, obj: Resource, status: dict[str, Any]) -> Resource:
        self.calls.append(("status", status["phase"]))
        return obj


def test_the_event_of_a_failed_phase_is_recorded_before_the_status_shows_it() -> None:
    client = _Recording()
    transition(client, _disk(), FAILED, "ImportFailed", "the source answered 404")  # type: ignore[arg-type]
    assert client.calls == [
        ("event", ("Warning", "ImportFailed", "the source answered 404")),
        ("status", FAILED),
    ]


def test_a_ready_phase_has_a_normal_event_and_a_status_already_so_writes_nothing() -> None:
    client = _Recording()
    transition(client, _disk({"phase": "Provisioning"}), READY, "Ready", "")  # type: ignore[arg-type]
    assert client.calls == [("event", ("Normal", "Ready", "")), ("status", READY)]
    ready = {"type": READY, "status": "True", "reason": "Ready", "observedGeneration": 1}
    again = _Recording()
    already = _disk({"phase": READY, "observedGeneration": 1, "conditions": [ready]})
    transition(again, already, READY, "Ready", "")  # type: ignore[arg-type]
    assert again.calls == []
