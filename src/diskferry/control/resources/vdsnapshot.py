"""VirtualDiskSnapshot: a point-in-time copy of a VirtualDisk, usable as a disk's source."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.resources.common import ApiVersion
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    READY,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
    Status,
)


class SnapshotPhase(StrEnum):
    """Where a snapshot is in its life."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    READY = "Ready"
    FAILED = "Failed"
    TERMINATING = "Terminating"


class VirtualDiskSnapshotSpec(ApiModel):
    """The disk to copy, and whether the copy must be consistent (its machine's disks frozen)."""

    virtual_disk_name: str = Field(
        alias="virtualDiskName",
        pattern=NAME_PATTERN,
        description="The VirtualDisk to copy, in the same namespace; the snapshot waits until "
        "it is Ready. Required.",
    )
    required_consistency: bool = Field(
        default=True,
        alias="requiredConsistency",
        description="true (the default): a disk a running VirtualMachine holds is copied only "
        "at an instant with the guest's filesystems frozen through its guest agent; until "
        "that can be done the snapshot waits Pending (PotentiallyInconsistent). false: it is "
        "copied at once, and `status.consistent` says whether it came out consistent.",
    )


class VirtualDiskSnapshotStatus(Status):
    """What was observed of the snapshot."""

    phase: SnapshotPhase | None = Field(
        default=None,
        description="Pending (waiting for its disk, or for a consistent moment), InProgress "
        "(being copied), Ready (the copy is whole), Failed (the Ready condition's reason and "
        "message say why), Terminating (being deleted).",
    )
    consistent: bool | None = Field(
        default=None,
        description="Whether the copy is consistent: true when no VirtualMachine used the "
        "disk, or its guest's filesystems were frozen at the instant of the copy; false when "
        "a running VM could change the disk while it was copied.",
    )
    volume_snapshot_name: str | None = Field(
        default=None,
        alias="volumeSnapshotName",
        description="The claim that holds the copy (vds-<snapshot>-<uid>), in the disk's "
        "StorageClass; shown where Deckhouse shows its VolumeSnapshot.",
    )


class VirtualDiskSnapshot(Resource):
    """A copy of a disk as it was when the snapshot was taken.

    The copy is a claim in the disk's StorageClass, usable as a VirtualDisk's objectRef. A
    snapshot of a disk a running VirtualMachine holds freezes the guest's filesystems, through its
    agent, for the instant of the copy only.
    """

    CONDITIONS = {
        READY: "True while the snapshot is Ready: the copy of its disk is made. False in every "
        "other phase, the reason saying why (WaitingForDisk, PotentiallyInconsistent, "
        "InProgress, a failure's reason).",
        **RECONCILED_CONDITION,
    }

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualDiskSnapshot"] = "VirtualDiskSnapshot"
    spec: VirtualDiskSnapshotSpec
    status: VirtualDiskSnapshotStatus = Field(default_factory=VirtualDiskSnapshotStatus)


VIRTUAL_DISK_SNAPSHOTS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualDiskSnapshot",
    plural="virtualdisksnapshots",
    model=VirtualDiskSnapshot,
    short_names=("vdsnapshot", "vds"),
    categories=("all", "diskferry"),
    columns=(
        Column("Phase", ".status.phase"),
        Column("Consistent", ".status.consistent", "boolean"),
        Column("VolumeSnapshot", ".status.volumeSnapshotName", priority=1),
        AGE,
    ),
)
