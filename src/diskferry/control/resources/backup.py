"""Backup: Velero's shape over diskferry's movers — the VirtualMachines of some namespaces that
a label selector picks, one DataUpload each, with a volume policy saying which disks go."""

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
from diskferry.control.resources.common import ApiVersion, Duration
from diskferry.control.resources.labelselector import LabelSelector

BACKUP_NAME = "diskferry.io/backup-name"
"""The label of a Backup's DataUploads (and a Restore's DataDownloads: `restore-name`)."""


class VolumeType(StrEnum):
    """What a VM's block device is, as a volume policy's condition names it."""

    DISK = "disk"
    CDROM = "cdrom"
    CLOUD_INIT = "cloudInit"


class PolicyConditions(ApiModel):
    """What a rule matches: all the conditions given (none given matches every volume)."""

    volume_types: list[VolumeType] | None = Field(default=None, alias="volumeTypes")
    pvc_labels: dict[str, str] | None = Field(default=None, alias="pvcLabels")
    storage_class: list[str] | None = Field(default=None, alias="storageClass")


class PolicyAction(ApiModel):
    """What happens to a volume a rule matches: moved by the data mover, or skipped."""

    type: Literal["skip", "snapshot"]


class VolumePolicyRule(ApiModel):
    """One rule of a volume policy."""

    conditions: PolicyConditions = Field(default_factory=PolicyConditions)
    action: PolicyAction


class VolumePolicy(ApiModel):
    """Velero's volume policies: the rules in order, the first match wins."""

    version: str = "v1"
    volume_policies: list[VolumePolicyRule] = Field(default_factory=list, alias="volumePolicies")


class BackupSpec(ApiModel):
    """Which VMs (all namespaces when `includedNamespaces` is empty or `*`), and where."""

    included_namespaces: list[str] = Field(default_factory=list, alias="includedNamespaces")
    label_selector: LabelSelector | None = Field(default=None, alias="labelSelector")
    storage_location: str = Field(alias="storageLocation", pattern=NAME_PATTERN)
    ttl: Duration | None = None
    volume_policy: VolumePolicy | None = Field(default=None, alias="volumePolicy")


class BackupPhase(StrEnum):
    """Velero's Backup phases."""

    NEW = "New"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    PARTIALLY_FAILED = "PartiallyFailed"
    FAILED = "Failed"


class BackupVolume(ApiModel):
    """One block device of a selected VM and what happened to it."""

    virtual_machine: str = Field(alias="virtualMachine")
    namespace: str
    kind: str
    name: str
    action: Literal["backup", "skip"]
    phase: str
    reason: str
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    data_upload: str | None = Field(default=None, alias="dataUpload")


class BackupProgress(ApiModel):
    """VMs backed up of those selected."""

    total_items: int = Field(default=0, alias="totalItems")
    items_backed_up: int = Field(default=0, alias="itemsBackedUp")
    items_failed: int = Field(default=0, alias="itemsFailed")


class BackupStatus(Status):
    """Where the backup is, each volume, and the counts."""

    phase: BackupPhase | None = None
    message: str | None = None
    start_timestamp: str | None = Field(default=None, alias="startTimestamp")
    completion_timestamp: str | None = Field(default=None, alias="completionTimestamp")
    expiration: str | None = None
    progress: BackupProgress = Field(default_factory=BackupProgress)
    volumes: list[BackupVolume] = Field(default_factory=list)


class Backup(Resource):
    """A backup of VirtualMachines with their disks and manifests."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["Backup"] = "Backup"
    spec: BackupSpec
    status: BackupStatus = Field(default_factory=BackupStatus)


BACKUPS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="Backup",
    plural="backups",
    model=Backup,
    categories=("diskferry",),
    columns=(
        Column("Status", ".status.phase"),
        Column("Items", ".status.progress.totalItems", "integer"),
        Column("Backed Up", ".status.progress.itemsBackedUp", "integer"),
        Column("Failed", ".status.progress.itemsFailed", "integer"),
        Column("Storage Location", ".spec.storageLocation"),
        Column("Expires", ".status.expiration", "date", priority=1),
        AGE,
    ),
)
