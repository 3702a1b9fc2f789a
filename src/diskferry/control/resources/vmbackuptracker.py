"""VirtualMachineBackupTracker, KubeVirt's backup API shape: the latest checkpoint of one
VirtualMachine's backups, which the next backup through the tracker is incremental from."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.kinds import Column, KindInfo
from diskferry.control.model import API_VERSION, GROUP, VERSION, ApiModel, Resource, Status
from diskferry.control.resources.common import ApiVersion


class BackupSourceKind(StrEnum):
    """What a backup names as its source: a VM, or a tracker of one."""

    VIRTUAL_MACHINE = "VirtualMachine"
    VIRTUAL_MACHINE_BACKUP_TRACKER = "VirtualMachineBackupTracker"


class TrackedMachine(ApiModel):
    """The VirtualMachine a tracker follows, in the tracker's namespace."""

    api_group: Literal["diskferry.io"] | None = Field(default=None, alias="apiGroup")
    kind: Literal[BackupSourceKind.VIRTUAL_MACHINE]
    name: str = Field(min_length=1)


class BackupVolumeInfo(ApiModel):
    """A volume of a backup: its name (the VirtualDisk) and its target in the VM's QEMU."""

    volume_name: str = Field(alias="volumeName")
    disk_target: str | None = Field(default=None, alias="diskTarget")
    data_endpoint: str | None = Field(default=None, alias="dataEndpoint")
    map_endpoint: str | None = Field(default=None, alias="mapEndpoint")


class BackupCheckpoint(ApiModel):
    """A checkpoint a backup made: the dirty bitmaps' name, when, and the volumes it covers."""

    name: str
    creation_time: datetime | None = Field(default=None, alias="creationTime")
    volumes: list[BackupVolumeInfo] = Field(default_factory=list)


class VirtualMachineBackupTrackerSpec(ApiModel):
    """The VM tracked."""

    source: TrackedMachine


class VirtualMachineBackupTrackerStatus(Status):
    """The checkpoint of the latest backup made through the tracker."""

    latest_checkpoint: BackupCheckpoint | None = Field(default=None, alias="latestCheckpoint")


class VirtualMachineBackupTracker(Resource):
    """The checkpoint chain of a VM's backups, kept between them."""

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
        Column("SourceName", ".spec.source.name"),
        Column("LatestCheckpoint", ".status.latestCheckpoint.name"),
        Column("CheckpointTime", ".status.latestCheckpoint.creationTime", "date"),
    ),
)
