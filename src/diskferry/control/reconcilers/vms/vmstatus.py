"""What a VM's status says beside its phase, as Deckhouse's does: the resources it runs (or would
run) with, its CPU topology, and its phase history with the launch's durations."""

from __future__ import annotations

from datetime import datetime
from itertools import pairwise
from typing import Any

from diskferry.control.clock import rfc3339
from diskferry.control.resources.virtualmachine import MachinePhase

PHASES_KEPT = 5
CORES_PER_SOCKET = 16
MAX_SOCKETS = 8


def topology(cores: int) -> dict[str, int]:
    """Sockets and cores per socket for `cores`, as Deckhouse lays them out: one socket up to 16
    cores, then 2, 4 or 8 sockets, cores per socket rounded up."""
    if cores <= CORES_PER_SOCKET:
        return {"sockets": 1, "coresPerSocket": cores}
    sockets = next((s for s in (2, 4) if cores <= CORES_PER_SOCKET * s), MAX_SOCKETS)
    return {"sockets": sockets, "coresPerSocket": -(-cores // sockets)}


def requested_cores(cores: int, percent: int) -> str:
    """The CPU the VM is guaranteed, as a quantity: cores times the fraction."""
    millis = cores * percent * 10
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def resources(cores: int, percent: int, memory: str) -> dict[str, Any]:
    """`status.resources` for `cores` at `percent`, with `memory`."""
    return {
        "cpu": {
            "cores": cores,
            "coreFraction": f"{percent}%",
            "requestedCores": requested_cores(cores, percent),
            "topology": topology(cores),
        },
        "memory": {"size": memory},
    }


def _seconds(later: str, earlier: str) -> str:
    gap = datetime.fromisoformat(later) - datetime.fromisoformat(earlier)
    return f"{int(gap.total_seconds())}s"


def stats(before: dict[str, Any] | None, phase: str, now: datetime) -> dict[str, Any]:
    """`status.stats` once the VM is in `phase`: the phase appended to the transitions (the
    last PHASES_KEPT kept), the launch's durations from them, and lastStartTime while it
    runs."""
    kept = dict(before or {})
    transitions = list(kept.get("phasesTransitions") or [])
    if not transitions or transitions[-1].get("phase") != phase:
        transitions.append({"phase": phase, "timestamp": rfc3339(now)})
    transitions = transitions[-PHASES_KEPT:]
    kept["phasesTransitions"] = transitions
    launch = dict(kept.get("launchTimeDuration") or {})
    pairs = list(pairwise(transitions))
    if phase in (MachinePhase.PENDING, MachinePhase.STOPPED):
        launch = {}
    for earlier, later in pairs[::-1]:
        step = (earlier.get("phase"), later.get("phase"))
        if step == (MachinePhase.PENDING, MachinePhase.STARTING):
            waited = _seconds(later["timestamp"], earlier["timestamp"])
            launch.setdefault("waitingForDependencies", waited)
        if step == (MachinePhase.STARTING, MachinePhase.RUNNING):
            started = _seconds(later["timestamp"], earlier["timestamp"])
            launch.setdefault("virtualMachineStarting", started)
    kept["launchTimeDuration"] = launch
    if phase == MachinePhase.RUNNING:
        kept.setdefault("lastStartTime", transitions[-1]["timestamp"])
    else:
        kept.pop("lastStartTime", None)
    return {key: value for key, value in kept.items() if value}


def replacing(before: Any, after: Any) -> Any:
    """The merge patch that makes `before` into `after`: `after` itself when they are equal or
    not both objects, else `after` with None for each key `before` has and `after` has not."""
    if before == after or not isinstance(before, dict) or not isinstance(after, dict):
        return after
    patch = {key: replacing(before.get(key), value) for key, value in after.items()}
    return {**{key: None for key in before.keys() - after.keys()}, **patch}


LIVE = (
    "runPolicy",
    "disruptions",
    "terminationGracePeriodSeconds",
    "liveMigrationPolicy",
    "tolerations",
    "priorityClassName",
    "topologySpreadConstraints",
    "affinity",
    "nodeSelector",
    "virtualMachineIPAddressName",
    "qmpSocket",
)
"""The spec's fields a running VM takes without a restart (or that only placement reads)."""


def applied(spec: dict[str, Any]) -> dict[str, Any]:
    """What of a VM's spec its QEMU is started with: all but the LIVE fields."""
    return {key: value for key, value in spec.items() if key not in LIVE}


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        found: dict[str, Any] = {}
        for key, inner in value.items():
            found.update(_leaves(inner, f"{path}.{key}" if path else key))
        return found
    return {path: value}


def restart_changes(running: dict[str, Any], wanted: dict[str, Any]) -> list[dict[str, Any]]:
    """The changes from the spec a VM runs with to the one wanted that wait for a restart, as
    Deckhouse lists them (operation, path, current and desired values)."""
    before, after = _leaves(applied(running)), _leaves(applied(wanted))
    changes = []
    for path in sorted(before.keys() | after.keys()):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        operation = "add" if path not in before else "remove" if path not in after else "replace"
        change: dict[str, Any] = {"operation": operation, "path": path}
        if old is not None:
            change["currentValue"] = old
        if new is not None:
            change["desiredValue"] = new
        changes.append(change)
    return changes
