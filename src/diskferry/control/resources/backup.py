"""Backup: Velero's shape over diskferry's movers — the VirtualMachines that the namespace,
resource and label filters pick, one DataUpload each, with a volume policy saying which disks
go; Velero's fields that mean nothing here are accepted and say why."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.resources.common import ApiVersion, Duration
from diskferry.control.resources.hooks import BackupHooks, HookStatus
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.noeffect import no_effect
from diskferry.control.resources.selection import RESOURCES, Names, Selection

BACKUP_NAME = "diskferry.io/backup-name"
"""The label of a Backup's DataUploads (and a Restore's DataDownloads: `restore-name`)."""


class VolumeType(StrEnum):
    """What a VM's block device is, as a volume policy's condition names it."""

    DISK = "disk"
    CDROM = "cdrom"
    CLOUD_INIT = "cloudInit"


class PolicyConditions(ApiModel):
    """What a rule matches: all the conditions given (none given matches every volume)."""

    volume_types: list[VolumeType] | None = Field(
        default=None,
        alias="volumeTypes",
        description="The kinds of block device matched: disk (a VirtualDisk), cdrom (an image), "
        'cloudInit (a disk or image labelled diskferry.io/cloud-init: "true"). Unset: any.',
    )
    pvc_labels: dict[str, str] | None = Field(
        default=None,
        alias="pvcLabels",
        description="Labels the disk or image must all have, with these values. Unset: any.",
    )
    storage_class: list[str] | None = Field(
        default=None,
        alias="storageClass",
        description="The StorageClasses matched: a VirtualDisk's spec.persistentVolumeClaim."
        "storageClassName must be one of them. Unset: any.",
    )


class PolicyAction(ApiModel):
    """What happens to a volume a rule matches: moved by the data mover, or skipped."""

    type: Literal["skip", "snapshot"] = Field(
        description="skip (not backed up) or snapshot (the disk's data moved into the "
        "repository; an image is skipped all the same, as the data mover moves disks only). "
        "Required."
    )


class VolumePolicyRule(ApiModel):
    """One rule of a volume policy."""

    conditions: PolicyConditions = Field(
        default_factory=PolicyConditions,
        description="What the rule matches: every condition given. Default: every volume.",
    )
    action: PolicyAction = Field(description="What happens to a volume it matches; required.")


class VolumePolicy(ApiModel):
    """Velero's volume policies: the rules in order, the first match wins."""

    version: str = Field(default="v1", description="The document's version, v1 (the default).")
    volume_policies: list[VolumePolicyRule] = Field(
        default_factory=list,
        alias="volumePolicies",
        description="The rules, in order: the first that matches a VM's block device decides. "
        "A device no rule matches is backed up when it is a VirtualDisk, skipped when it is an "
        "image.",
    )


class TypedLocalObjectReference(ApiModel):
    """An object in the same namespace, by group, kind and name."""

    api_group: str | None = Field(
        default=None, alias="apiGroup", description="The object's API group."
    )
    kind: str = Field(description="The object's kind.")
    name: str = Field(description="The object's name.")


class BackupMetadata(ApiModel):
    """Metadata of the Backups a Schedule makes from its template."""

    labels: dict[str, str] | None = Field(
        default=None,
        description="The labels of each Backup the Schedule makes, instead of the Schedule's own.",
    )


class UploaderConfigForBackup(ApiModel):
    """Velero's file-system uploader settings."""

    parallel_files_upload: int | None = no_effect(
        "the data mover copies block devices, not files",
        "Files uploaded in parallel.",
        default=None,
        alias="parallelFilesUpload",
    )


DEFAULT_TTL = "720h0m0s"
"""How long a Backup is kept when its spec does not say (Velero's --default-backup-ttl)."""
DATAMOVERS = ("", "velero", "diskferry")
"""The `spec.datamover` values that name diskferry's data mover."""
NO_CSI = "a VM's disks are read at a point its QEMU fixes (CBT), not through CSI snapshots"
NO_NATIVE = "there are no native volume snapshots: the data mover moves every disk's data"
NO_FILES = "there are no Pod volumes: VirtualDisks are backed up as block devices"


class BackupSpec(Selection):
    """Which VMs (their namespaces, labels, kinds), where, how long, and the volume policy."""

    metadata: BackupMetadata | None = Field(
        default=None,
        description="In a Schedule's template: the metadata of the Backups it makes. On a "
        "Backup itself, unused.",
    )
    included_cluster_scoped_resources: Names = Field(
        default_factory=list,
        alias="includedClusterScopedResources",
        description="Cluster-scoped resources taken (Velero's newer filter, not with "
        "includedResources, excludedResources or includeClusterResources): here "
        "ClusterVirtualImage, as manifests." + RESOURCES,
    )
    excluded_cluster_scoped_resources: Names = Field(
        default_factory=list,
        alias="excludedClusterScopedResources",
        description="Cluster-scoped resources left out (the newer filter)." + RESOURCES,
    )
    included_namespace_scoped_resources: Names = Field(
        default_factory=list,
        alias="includedNamespaceScopedResources",
        description="Namespaced resources taken (the newer filter); empty or `*`: all." + RESOURCES,
    )
    excluded_namespace_scoped_resources: Names = Field(
        default_factory=list,
        alias="excludedNamespaceScopedResources",
        description="Namespaced resources left out (the newer filter)." + RESOURCES,
    )
    ordered_resources: dict[str, str] | None = no_effect(
        "the VMs' DataUploads are all made at once and admitted oldest first under "
        "maxConcurrentDataMovers",
        "The order objects are backed up in, per resource.",
        default=None,
        alias="orderedResources",
    )
    storage_location: str | None = Field(
        default=None,
        alias="storageLocation",
        pattern=NAME_PATTERN,
        description="The BackupStorageLocation to back up into. Unset: the location of the "
        "Backup's namespace with `default: true`, written here when the backup starts "
        "(FailedValidation when there is none).",
    )
    volume_snapshot_locations: list[str] | None = no_effect(
        NO_NATIVE,
        "VolumeSnapshotLocations for native volume snapshots.",
        default=None,
        alias="volumeSnapshotLocations",
    )
    ttl: Duration | None = Field(
        default=None,
        description=f"How long the Backup is kept after it started; it is then deleted with "
        f"its data. Unset or 0: {DEFAULT_TTL}, as Velero's default.",
    )
    snapshot_volumes: bool | None = Field(
        default=None,
        alias="snapshotVolumes",
        description="false: the VMs' and disks' manifests are backed up, no disk data. "
        "Unset or true: the disks' data is moved too.",
    )
    snapshot_move_data: bool | None = no_effect(
        "the data mover always moves the data into the location's repository",
        "Whether snapshot data is moved to the storage location.",
        default=None,
        alias="snapshotMoveData",
    )
    datamover: str | None = Field(
        default=None,
        description='The data mover: "", velero or diskferry (all diskferry\'s own, the '
        "default); any other is FailedValidation.",
    )
    default_volumes_to_fs_backup: bool | None = no_effect(
        NO_FILES,
        "Whether every Pod volume is backed up with the file-system uploader.",
        default=None,
        alias="defaultVolumesToFsBackup",
    )
    default_volumes_to_restic: bool | None = no_effect(
        NO_FILES,
        "The deprecated name of defaultVolumesToFsBackup.",
        default=None,
        alias="defaultVolumesToRestic",
    )
    csi_snapshot_timeout: Duration | None = no_effect(
        NO_CSI,
        "How long to wait for a CSI snapshot to be ready.",
        default=None,
        alias="csiSnapshotTimeout",
    )
    item_operation_timeout: Duration | None = Field(
        default=None,
        alias="itemOperationTimeout",
        description="How long each VM's DataUpload may take from its acceptance (its "
        "operationTimeout). Unset or 0: the DataMoverConfig's operationTimeout (4h, Velero's "
        "default).",
    )
    resource_policy: TypedLocalObjectReference | None = no_effect(
        "there are no ConfigMaps here: give the same policy document inline in spec.volumePolicy",
        "The ConfigMap holding the volume policies.",
        default=None,
        alias="resourcePolicy",
    )
    volume_group_snapshot_label_key: str | None = no_effect(
        "all the disks of one VM are checkpointed in one QMP transaction; VMs are not grouped",
        "The label key grouping PVCs into one VolumeGroupSnapshot.",
        default=None,
        alias="volumeGroupSnapshotLabelKey",
    )
    uploader_config: UploaderConfigForBackup | None = Field(
        default=None, alias="uploaderConfig", description="Velero's uploader settings."
    )
    hooks: BackupHooks | None = Field(
        default=None,
        description="Commands run in the guests of the VMs through their guest agents, before "
        "and after their backup.",
    )
    volume_policy: VolumePolicy | None = Field(
        default=None,
        alias="volumePolicy",
        description="Velero's volume policy document, inline (diskferry's; Velero reads it from "
        "the ConfigMap resourcePolicy names): which disks go.",
    )

    def filter_errors(self) -> list[str]:
        """Velero's validation errors of the spec's filters and data mover."""
        errors = self.selection_errors()
        old = self.included_resources or self.excluded_resources
        new = (
            self.included_cluster_scoped_resources
            or self.excluded_cluster_scoped_resources
            or self.included_namespace_scoped_resources
            or self.excluded_namespace_scoped_resources
        )
        if new and (old or self.include_cluster_resources is not None):
            errors.append(
                "include-resources, exclude-resources and include-cluster-resources are old "
                "filter parameters; include-cluster-scoped-resources, "
                "exclude-cluster-scoped-resources, include-namespace-scoped-resources and "
                "exclude-namespace-scoped-resources are new filter parameters: they cannot be "
                "used together"
            )
        if (self.datamover or "") not in DATAMOVERS:
            errors.append(
                f"spec.datamover {self.datamover!r}: only diskferry's data mover is here "
                '(datamover "", velero or diskferry)'
            )
        return errors


class BackupPhase(StrEnum):
    """Velero's Backup phases."""

    NEW = "New"
    QUEUED = "Queued"
    READY_TO_START = "ReadyToStart"
    FAILED_VALIDATION = "FailedValidation"
    IN_PROGRESS = "InProgress"
    WAITING_FOR_PLUGIN_OPERATIONS = "WaitingForPluginOperations"
    WAITING_FOR_PLUGIN_OPERATIONS_PARTIALLY_FAILED = "WaitingForPluginOperationsPartiallyFailed"
    FINALIZING = "Finalizing"
    FINALIZING_PARTIALLY_FAILED = "FinalizingPartiallyFailed"
    COMPLETED = "Completed"
    PARTIALLY_FAILED = "PartiallyFailed"
    FAILED = "Failed"
    DELETING = "Deleting"


class BackupVolume(ApiModel):
    """One block device of a selected VM and what happened to it."""

    virtual_machine: str = Field(alias="virtualMachine", description="The VirtualMachine.")
    namespace: str = Field(description="The VM's namespace.")
    kind: str = Field(
        description="VirtualDisk, VirtualImage or ClusterVirtualImage; PersistentVolumeClaim "
        "for a KubeVirt VM's (kubevirt.io) disk, in a cluster."
    )
    name: str = Field(description="The disk's, image's or claim's name.")
    action: Literal["backup", "skip"] = Field(
        description="backup (its data moved by the VM's DataUpload) or skip, as the volume "
        "policy, snapshotVolumes and the resource filters decide."
    )
    phase: str = Field(
        description="Pending, InProgress, Completed, Failed (its DataUpload failed or is "
        "gone, or the VM misses a disk), or Skipped."
    )
    reason: str = Field(description="Why it is backed up or skipped, or why it failed.")
    snapshot_id: str | None = Field(
        default=None,
        alias="snapshotID",
        description="The disk's snapshot in the repository, once Completed: what a "
        "DataDownload's snapshotID names.",
    )
    data_upload: str | None = Field(
        default=None, alias="dataUpload", description="The DataUpload that moves the VM's disks."
    )


class SelectedMachine(ApiModel):
    """A VM the filters picked."""

    namespace: str = Field(description="Its namespace.")
    name: str = Field(description="Its name.")


class BackupProgress(ApiModel):
    """VMs backed up of those selected."""

    total_items: int = Field(default=0, alias="totalItems", description="VMs selected.")
    items_backed_up: int = Field(
        default=0, alias="itemsBackedUp", description="VMs backed up, once all have ended."
    )
    items_failed: int = Field(default=0, alias="itemsFailed", description="VMs that failed.")


NEVER_SET = "never set here"


class BackupStatus(Status):
    """Where the backup is, each volume, and the counts."""

    phase: BackupPhase | None = Field(
        default=None,
        description="Where the backup is, in Velero's phases: New (waiting for its "
        "BackupStorageLocation to be Available), FailedValidation (see validationErrors), "
        "InProgress (its DataUploads made), WaitingForPluginOperations (waiting for them to "
        "end), then Completed, PartiallyFailed (some VMs failed) or Failed (all did, or the "
        "backup failed as a whole); Deleting while its data is removed. Velero's other "
        "phases do not occur here.",
    )
    message: str | None = Field(default=None, description="What the backup does or waits for.")
    version: int | None = no_effect(
        f"{NEVER_SET}: the manifests are one document in the repository",
        "The backup format's major version.",
        default=None,
    )
    format_version: str | None = no_effect(
        f"{NEVER_SET}: the manifests are one document in the repository",
        "The backup format's version.",
        default=None,
        alias="formatVersion",
    )
    validation_errors: list[str] | None = Field(
        default=None,
        alias="validationErrors",
        description="Why the Backup is FailedValidation.",
    )
    failure_reason: str | None = Field(
        default=None, alias="failureReason", description="Why the backup failed as a whole."
    )
    start_timestamp: datetime | None = Field(
        default=None, alias="startTimestamp", description="When the backup started."
    )
    completion_timestamp: datetime | None = Field(
        default=None, alias="completionTimestamp", description="When it ended."
    )
    expiration: datetime | None = Field(
        default=None,
        description="When the Backup is deleted with its data: its start plus its ttl.",
    )
    volume_snapshots_attempted: int | None = no_effect(
        f"{NEVER_SET}: {NO_NATIVE}",
        "Native volume snapshots tried.",
        default=None,
        alias="volumeSnapshotsAttempted",
    )
    volume_snapshots_completed: int | None = no_effect(
        f"{NEVER_SET}: {NO_NATIVE}",
        "Native volume snapshots made.",
        default=None,
        alias="volumeSnapshotsCompleted",
    )
    csi_volume_snapshots_attempted: int | None = no_effect(
        f"{NEVER_SET}: {NO_CSI}",
        "CSI snapshots tried.",
        default=None,
        alias="csiVolumeSnapshotsAttempted",
    )
    csi_volume_snapshots_completed: int | None = no_effect(
        f"{NEVER_SET}: {NO_CSI}",
        "CSI snapshots made.",
        default=None,
        alias="csiVolumeSnapshotsCompleted",
    )
    backup_item_operations_attempted: int | None = Field(
        default=None,
        alias="backupItemOperationsAttempted",
        description="DataUploads made (Velero's asynchronous item operations).",
    )
    backup_item_operations_completed: int | None = Field(
        default=None,
        alias="backupItemOperationsCompleted",
        description="Of them, those Completed.",
    )
    backup_item_operations_failed: int | None = Field(
        default=None,
        alias="backupItemOperationsFailed",
        description="Of them, those that failed or were cancelled or deleted.",
    )
    hook_status: HookStatus | None = Field(
        default=None, alias="hookStatus", description="The hooks run, and failed."
    )
    warnings: int | None = Field(
        default=None,
        description="Warnings the backup gave: hooks failed with onError Continue, a backup "
        "that takes no VirtualMachine.",
    )
    errors: int | None = Field(
        default=None,
        description="Errors the backup met: VMs not backed up, hooks failed with onError Fail.",
    )
    queue_position: int | None = no_effect(
        f"{NEVER_SET}: Backups are not queued; their DataUploads are admitted oldest first",
        "The Backup's place in the queue.",
        default=None,
        alias="queuePosition",
    )
    progress: BackupProgress = Field(
        default_factory=BackupProgress, description="VMs backed up of those selected."
    )
    virtual_machines: list[SelectedMachine] = Field(
        default_factory=list,
        alias="virtualMachines",
        description="The VMs the filters picked.",
    )
    volumes: list[BackupVolume] = Field(
        default_factory=list,
        description="Every block device of the VMs selected, and what happened to it.",
    )


class Backup(Resource):
    """A backup of VirtualMachines with their disks and manifests.

    Velero's filters pick the VirtualMachines; a Backup that takes none backs up nothing and says
    so. One DataUpload is made per selected VM with data to move (stopped ones too), named
    BACKUP-VM (BACKUP-NAMESPACE-VM for another namespace), in the Backup's namespace, labelled
    diskferry.io/backup-name and owned by the Backup; a generated name or label value longer than
    63 characters is cut and ends in a hash of the whole (a Restore's DataDownloads,
    RESTORE-VM-DISK, likewise). Once every upload has ended, the manifests of the VMs, of their
    VirtualDisks (a disk whose data was not moved too, without a snapshot) and of the images taken,
    the Backup's status and the repository's tracker of each VM go into the repository as the
    object metadata/NAMESPACE.BACKUP (sealed like every object).

    Once the Backup has ended and status.expiration has passed, it is deleted (Event Expired), and
    a finalizer holds it until its snapshots are forgotten, its metadata removed and the repository
    pruned (Event DataDeleted); other Backups' snapshots are left alone. The whole set, from a disk
    to its restore, is in examples/backup-restore.yaml.
    """

    CONDITIONS = RECONCILED_CONDITION

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
        Column("Expires", ".status.expiration", priority=1),
        AGE,
    ),
)
