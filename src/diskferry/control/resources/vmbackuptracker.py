"""VirtualMachineBackupTracker, KubeVirt's backup API shape: the latest checkpoint of one
VirtualMachine's backups, which the next backup through the tracker is incremental from. Its
spec is fixed at creation, as KubeVirt's."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field

from diskferry.control.resources.common import ApiVersion
from diskferry.control.resources.kinds import Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    VERSION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.noeffect import no_effect
from diskferry.control.resources.typedref import KUBEVIRT, Groups, TypedReference


class BackupSourceKind(StrEnum):
    """What a backup names as its source: a VM, or a tracker of one."""

    VIRTUAL_MACHINE = "VirtualMachine"
    VIRTUAL_MACHINE_BACKUP_TRACKER = "VirtualMachineBackupTracker"


MACHINE_GROUPS = (KUBEVIRT, GROUP, None)
"""The groups a VirtualMachine is named with: KubeVirt's kubevirt.io, diskferry.io, or none."""


class TrackedMachine(TypedReference):
    """The VirtualMachine a tracker follows, in the tracker's namespace: `apiGroup` kubevirt.io as
    KubeVirt writes it (the VirtualMachine of that name here), diskferry.io, or unset."""

    GROUPS: ClassVar[Groups] = {BackupSourceKind.VIRTUAL_MACHINE: MACHINE_GROUPS}
    kind: Literal[BackupSourceKind.VIRTUAL_MACHINE] = Field(
        description="VirtualMachine, the only kind a tracker follows."
    )


class BackupVolumeInfo(ApiModel):
    """A volume of a backup: its name (the VirtualDisk) and its target in the VM's QEMU."""

    volume_name: str = Field(alias="volumeName", description="The VirtualDisk's name.")
    disk_target: str | None = Field(
        default=None,
        alias="diskTarget",
        description="The disk's block node in the VM's QEMU, when the VM ran at the backup; "
        "unset for a stopped VM.",
    )
    data_endpoint: str | None = Field(
        default=None,
        alias="dataEndpoint",
        description="Pull: the URL of the disk's bytes at the point (GET, ?offset=&length= "
        "for a part); unset for Push.",
    )
    map_endpoint: str | None = Field(
        default=None,
        alias="mapEndpoint",
        description="Pull: the URL of the disk's extent map (JSON: offset, length and type "
        "data, zero or dirty, paged by ?offset=&length=&page_size=): the runs changed since the "
        "checkpoint for an Incremental backup, the allocated ones for a Full one; unset for "
        "Push.",
    )


class BackupCheckpoint(ApiModel):
    """A checkpoint a backup made: the dirty bitmaps' name, when, and the volumes it covers."""

    name: str = Field(
        description="The checkpoint's name, which the VM's disks carry as persistent dirty bitmaps."
    )
    creation_time: datetime | None = Field(
        default=None,
        alias="creationTime",
        description="When the backup that made it was created.",
    )
    volumes: list[BackupVolumeInfo] = Field(
        default_factory=list, description="The VM's disks the checkpoint covers."
    )


class VirtualMachineBackupTrackerSpec(ApiModel):
    """The VM tracked; fixed at creation."""

    source: TrackedMachine


class VirtualMachineBackupTrackerStatus(Status):
    """The checkpoint of the latest backup made through the tracker. A tracker has no phase
    and no conditions: `phase`, `conditions` and `observedGeneration` stay unset."""

    latest_checkpoint: BackupCheckpoint | None = Field(
        default=None,
        alias="latestCheckpoint",
        description="The checkpoint of the latest backup made through the tracker: the next "
        "one through it is incremental from there. Unset until a backup made one (a VM "
        "without changed-block tracking makes none).",
    )
    checkpoint_redefinition_required: bool | None = no_effect(
        "a checkpoint is a persistent dirty bitmap in the disk's qcow2 overlay, which survives "
        "the VM's restart, so there is nothing to define again",
        "KubeVirt's flag, set after the VM restarted, until its checkpoint is defined again in "
        "libvirt. Unset here.",
        default=None,
        alias="checkpointRedefinitionRequired",
    )


class VirtualMachineBackupTracker(Resource):
    """The checkpoint chain of a VM's backups, kept between them.

    KubeVirt's backup API shape: status.latestCheckpoint is the checkpoint of the latest backup
    made through it. A checkpoint is a persistent bitmap in the disk's qcow2 overlay, which a
    restart keeps.
    """

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualMachineBackupTracker"] = "VirtualMachineBackupTracker"
    spec: VirtualMachineBackupTrackerSpec
    status: VirtualMachineBackupTrackerStatus = Field(
        default_factory=VirtualMachineBackupTrackerStatus
    )

    @property
    def chain_id(self) -> str:
        """The id the pull checkpoints of this tracker carry in their bitmap names."""
        return "vmbt" + (self.metadata.uid or "").replace("-", "")


VIRTUAL_MACHINE_BACKUP_TRACKERS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachineBackupTracker",
    plural="virtualmachinebackuptrackers",
    model=VirtualMachineBackupTracker,
    short_names=("vmbackuptracker", "vmbackuptrackers"),
    categories=("diskferry",),
    columns=(
        Column("SourceKind", ".spec.source.kind"),
        Column("SourceName", ".spec.source.name"),
        Column("LatestCheckpoint", ".status.latestCheckpoint.name"),
        Column("CheckpointTime", ".status.latestCheckpoint.creationTime", "date"),
    ),
)
