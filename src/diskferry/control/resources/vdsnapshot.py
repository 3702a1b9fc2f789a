"""VirtualDiskSnapshot: a point-in-time copy of a VirtualDisk, usable as a disk's source."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.kinds import AGE, Column, KindInfo
from diskferry.control.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    VERSION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.common import ApiVersion


class SnapshotPhase(StrEnum):
    """Where a snapshot is in its life."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    READY = "Ready"
    FAILED = "Failed"
    TERMINATING = "Terminating"


class VirtualDiskSnapshotSpec(ApiModel):
    """The disk to copy, and whether the copy must be consistent (its machine's disks frozen)."""

    virtual_disk_name: str = Field(alias="virtualDiskName", pattern=NAME_PATTERN)
    required_consistency: bool = Field(default=True, alias="requiredConsistency")


class VirtualDiskSnapshotStatus(Status):
    """What was observed of the snapshot; `volumeSnapshotName` shows its claim, which the
    daemon finds by the snapshot's name and uid, never by this."""

    phase: SnapshotPhase | None = None
    consistent: bool | None = None
    volume_snapshot_name: str | None = Field(default=None, alias="volumeSnapshotName")


class VirtualDiskSnapshot(Resource):
    """A copy of a disk as it was when the snapshot was taken."""

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
