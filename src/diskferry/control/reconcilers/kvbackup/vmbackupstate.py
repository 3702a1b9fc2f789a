"""What the Push and Pull VirtualMachineBackups share: the source (the VM, its tracker, the
checkpoint to start from), the phases with KubeVirt's conditions, and the tracker advanced."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.clock import rfc3339
from diskferry.control.resources.virtualmachine import BlockDeviceKind, VirtualMachine
from diskferry.control.resources.vmbackup import (
    ENDED,
    BackupConditionType,
    BackupPhase,
    VirtualMachineBackup,
)
from diskferry.control.resources.vmbackuptracker import VirtualMachineBackupTracker
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import set_condition
from diskferry.control.runtime.phases import status_of


class BackupFailure(DiskferryError):
    """The backup cannot go on: its reason and message go into the Failed condition."""

    reason = "BackupFailed"


@dataclass(frozen=True)
class Source:
    """The VM backed up, its tracker, and the checkpoint to start from."""

    vm: VirtualMachine
    tracker: VirtualMachineBackupTracker | None
    since: str | None

    @property
    def name(self) -> str:
        """The VM's name."""
        return self.vm.metadata.name or ""

    @property
    def chain(self) -> str:
        """The id the Pull checkpoints carry: the tracker's, or the VM's for an untracked one."""
        if self.tracker is not None:
            return self.tracker.chain_id
        return "vm" + (self.vm.metadata.uid or "").replace("-", "")

    def targets(self) -> dict[str, str]:
        """Each VirtualDisk's target in the running VM's QEMU (none while it is stopped)."""
        devices = self.vm.status.block_devices or []
        return {d.name: d.target for d in devices if d.kind is BlockDeviceKind.VIRTUAL_DISK}


def backup_conditions(
    obj: VirtualMachineBackup, phase: BackupPhase, reason: str, message: str
) -> list[dict[str, Any]]:
    """The conditions `phase` means: Progressing until the end, then Complete or Failed."""
    conditions = status_of(obj).get("conditions") or []
    generation = obj.metadata.generation
    ended = phase in ENDED
    conditions = set_condition(
        obj,
        conditions,
        BackupConditionType.PROGRESSING,
        not ended,
        reason if not ended else phase.value,
        message if not ended else "",
        generation,
    )
    if ended:
        for kind in (BackupConditionType.COMPLETE, BackupConditionType.FAILED):
            conditions = set_condition(
                obj, conditions, kind, kind.value == phase.value, reason, message, generation
            )
    return conditions


FROZEN = "filesystems frozen"
"""The consistency the engines report of a point taken with the guest's filesystems frozen."""


def quiesced(
    obj: VirtualMachineBackup, skip: bool, consistency: str | None
) -> list[dict[str, Any]]:
    """The conditions with Quiesced set from what the point's session reported."""
    if skip:
        frozen, reason, message = False, "QuiesceSkipped", "skipQuiesce asked not to freeze"
    elif consistency == FROZEN:
        frozen, reason, message = True, "QuiesceSucceeded", "the guest's filesystems were frozen"
    else:
        frozen, reason = False, "QuiesceFailed"
        message = f"the guest agent did not freeze the guest: the backup is {consistency}"
    conditions = status_of(obj).get("conditions") or []
    generation = obj.metadata.generation
    quiesced_type = BackupConditionType.QUIESCED
    return set_condition(obj, conditions, quiesced_type, frozen, reason, message, generation)


def move(
    client: Client,
    obj: VirtualMachineBackup,
    phase: BackupPhase,
    reason: str,
    message: str,
    fields: dict[str, Any] | None = None,
) -> VirtualMachineBackup:
    """Set the phase, its conditions and `fields`; an Event when the phase changes (a Warning
    for Failed); nothing written when all is so already."""
    status = status_of(obj)
    conditions = backup_conditions(obj, phase, reason, message)
    wanted = {**(fields or {}), "phase": phase.value, "observedGeneration": obj.metadata.generation}
    same = all(status.get(k) == v for k, v in wanted.items())
    if same and _same_conditions(status.get("conditions") or [], conditions):
        return obj
    if status.get("phase") != phase.value:
        kind = "Warning" if phase == BackupPhase.FAILED else "Normal"
        client.event(obj, kind, reason, message)
    return client.patch_status(obj, {**wanted, "conditions": conditions})


def _same_conditions(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> bool:
    keys = ("type", "status", "reason", "message")
    return [[c.get(k) for k in keys] for c in before] == [[c.get(k) for k in keys] for c in after]


def advance(
    client: Client,
    obj: VirtualMachineBackup,
    source: Source,
    checkpoint: str | None,
    volumes: list[str],
    now: datetime,
) -> None:
    """Record the backup's checkpoint as its tracker's latest (nothing without a tracker)."""
    if source.tracker is None or checkpoint is None:
        return
    targets = source.targets()
    latest = {
        "name": checkpoint,
        "creationTime": rfc3339(obj.metadata.creation_timestamp or now),
        "volumes": [{"volumeName": v, "diskTarget": targets.get(v)} for v in volumes],
    }
    client.patch_status(source.tracker, {"latestCheckpoint": latest})
    message = f"checkpoint {checkpoint} of VirtualMachineBackup {obj.metadata.name}"
    client.event(source.tracker, "Normal", "CheckpointRecorded", message)
