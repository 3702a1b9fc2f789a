"""Restore: Velero's shape — the VirtualMachines and VirtualDisks of a Backup re-created from
the repository's manifests, each disk by a DataDownload, namespaces mapped as asked, filtered
by namespace, resource and label as Velero filters; Velero's fields that mean nothing here are
accepted and say why."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.resources.backup import TypedLocalObjectReference
from diskferry.control.resources.common import ApiVersion, Duration
from diskferry.control.resources.hooks import HookStatus, RestoreHooks
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
from diskferry.control.resources.selection import Names, Selection

RESTORE_NAME = "diskferry.io/restore-name"
"""The label of a Restore's DataDownloads."""
RUN_POLICY = "diskferry.io/restore-run-policy"
"""On a VM being restored: the runPolicy it is given back once all its disks are."""


class ExistingResourcePolicy(StrEnum):
    """What a Restore does to a VirtualMachine or VirtualDisk that exists already."""

    NONE = "none"
    UPDATE = "update"


class RestoreStatusSpec(ApiModel):
    """Resources whose status Velero restores too."""

    included_resources: Names | None = Field(
        default=None, alias="includedResources", description="Resources whose status is restored."
    )
    excluded_resources: Names | None = Field(
        default=None, alias="excludedResources", description="Resources whose status is not."
    )


class UploaderConfigForRestore(ApiModel):
    """Velero's file-system restore settings."""

    write_sparse_files: bool | None = no_effect(
        "a disk is always written sparsely: zero runs are not written",
        "Whether restored files are written sparsely.",
        default=None,
        alias="writeSparseFiles",
    )
    parallel_files_download: int | None = no_effect(
        "the data mover restores block devices, not files",
        "Files downloaded in parallel.",
        default=None,
        alias="parallelFilesDownload",
    )


class RestoreSpec(Selection):
    """Which backup, which of its VMs (namespaces, kinds, labels), where each goes, and what
    becomes of what exists."""

    backup_name: str | None = Field(
        default=None,
        alias="backupName",
        pattern=rf"^$|{NAME_PATTERN}",
        description="The Backup to restore. Empty: the latest Completed Backup of scheduleName; "
        "one of the two must be given (else FailedValidation).",
    )
    schedule_name: str | None = Field(
        default=None,
        alias="scheduleName",
        description="When backupName is empty: restore the latest Completed Backup this "
        "Schedule made.",
    )
    namespace_mapping: dict[str, str] = Field(
        default_factory=dict,
        alias="namespaceMapping",
        description="Source namespace to the namespace its VMs are restored into (made when "
        "missing); namespaces not named keep their name.",
    )
    restore_pvs: bool | None = Field(
        default=None,
        alias="restorePVs",
        description="false: the VMs and their disks are made from their manifests and no data "
        "is restored (a disk is made as its manifest says: blank, or imported again from its "
        "source). Unset or true: each disk's data is restored from the backup.",
    )
    existing_resource_policy: ExistingResourcePolicy | None = Field(
        default=None,
        alias="existingResourcePolicy",
        description="none (the default): a VirtualMachine that exists is left as it is, and "
        "so are its disks; a restored VM one of whose disks exists is left AlwaysOff. update: "
        "an existing VM that is stopped gets the backup's spec, labels and annotations (a "
        "running one is left, and the Restore says so); its VirtualDisks that exist get the "
        "backup's labels and annotations and are kept for it, their data never overwritten.",
    )
    restore_status: RestoreStatusSpec | None = no_effect(
        "a restored object's status is what its controller sees, never the backup's",
        "Resources whose status is restored too.",
        default=None,
        alias="restoreStatus",
    )
    preserve_node_ports: bool | None = no_effect(
        "there are no Services here",
        "Whether Services keep their node ports.",
        default=None,
        alias="preserveNodePorts",
    )
    resource_modifier: TypedLocalObjectReference | None = no_effect(
        "there are no ConfigMaps here to hold the patches",
        "The ConfigMap of JSON patches applied to objects before they are restored.",
        default=None,
        alias="resourceModifier",
    )
    item_operation_timeout: Duration | None = Field(
        default=None,
        alias="itemOperationTimeout",
        description="How long each disk's DataDownload may take from its acceptance (its "
        "operationTimeout). Unset or 0: the DataMoverConfig's operationTimeout (4h, Velero's "
        "default).",
    )
    uploader_config: UploaderConfigForRestore | None = Field(
        default=None, alias="uploaderConfig", description="Velero's uploader settings."
    )
    hooks: RestoreHooks | None = Field(
        default=None,
        description="Commands run in the guests of the restored VMs through their guest "
        "agents, once they run.",
    )

    def source_errors(self) -> list[str]:
        """Velero's validation errors of the restore's source and filters."""
        errors = self.selection_errors()
        if bool(self.backup_name) == bool(self.schedule_name):
            errors.append(
                "either a backup or schedule must be specified as a source for the restore, "
                "but not both"
            )
        return errors


class RestorePhase(StrEnum):
    """Velero's Restore phases."""

    NEW = "New"
    FAILED_VALIDATION = "FailedValidation"
    IN_PROGRESS = "InProgress"
    WAITING_FOR_PLUGIN_OPERATIONS = "WaitingForPluginOperations"
    WAITING_FOR_PLUGIN_OPERATIONS_PARTIALLY_FAILED = "WaitingForPluginOperationsPartiallyFailed"
    COMPLETED = "Completed"
    PARTIALLY_FAILED = "PartiallyFailed"
    FAILED = "Failed"
    FINALIZING = "Finalizing"
    FINALIZING_PARTIALLY_FAILED = "FinalizingPartiallyFailed"


class RestoredDisk(ApiModel):
    """One disk of a restored VM: its snapshot and its DataDownload's phase, or how it was
    made without one."""

    name: str = Field(description="The VirtualDisk, or a KubeVirt VM's claim.")
    snapshot_id: str | None = Field(
        default=None, alias="snapshotID", description="The snapshot its data comes from."
    )
    data_download: str | None = Field(
        default=None, alias="dataDownload", description="The DataDownload writing it."
    )
    phase: str | None = Field(
        default=None,
        description="The DataDownload's phase; Completed for a disk made from its manifest; "
        "Skipped for one that exists already.",
    )
    message: str | None = Field(
        default=None,
        description="How the disk was made without data, why it was left, or why it was not "
        "restored once its DataDownload ended.",
    )


class RestoreHookRun(ApiModel):
    """How one of a restored VM's hooks ended."""

    name: str = Field(description="The hook.")
    on_error: str = Field(alias="onError", description="Continue or Fail.")
    exit_code: int | None = Field(
        default=None, alias="exitCode", description="The command's exit code."
    )
    failed: bool = Field(description="Whether it failed, or could not run.")
    message: str = Field(description="How it ended.")


class RestoredMachine(ApiModel):
    """One VM restored: where, the runPolicy (or a KubeVirt VM's runStrategy) it gets back, its
    disks, its hooks."""

    namespace: str = Field(description="The namespace it is restored into.")
    name: str = Field(description="The VirtualMachine.")
    run_policy: str | None = Field(
        default=None,
        alias="runPolicy",
        description="The runPolicy it gets back once its disks are; unset for a KubeVirt VM.",
    )
    run_strategy: str | None = Field(
        default=None,
        alias="runStrategy",
        description="A KubeVirt VM's (kubevirt.io): the runStrategy it gets back once its disks "
        "are, held Halted until then, as OADP holds it; unset for a diskferry VM.",
    )
    phase: Literal["Restoring", "Completed", "Failed"] = Field(
        default="Restoring",
        description="Restoring, Completed, or Failed (left AlwaysOff, or a KubeVirt VM Halted).",
    )
    updated: bool | None = Field(
        default=None,
        description="true: the VM existed and was updated (existingResourcePolicy: update).",
    )
    disks: list[RestoredDisk] = Field(default_factory=list, description="Its disks.")
    hooks: Literal["Waiting", "Done"] | None = Field(
        default=None,
        description="Waiting: its hooks wait for it to run with an answering guest agent; "
        "Done: they ran, or cannot.",
    )
    hooks_since: datetime | None = Field(
        default=None, alias="hooksSince", description="Since when its hooks wait."
    )
    hook_runs: list[RestoreHookRun] = Field(
        default_factory=list, alias="hookRuns", description="Its hooks, as they ended."
    )


class RestoreProgress(ApiModel):
    """VMs restored of those in the backup."""

    total_items: int = Field(default=0, alias="totalItems", description="VMs to restore.")
    items_restored: int = Field(
        default=0, alias="itemsRestored", description="VMs restored with all their disks."
    )


class RestoreStatus(Status):
    """Where the restore is, each VM, and the counts."""

    phase: RestorePhase | None = Field(
        default=None,
        description="Where the restore is, in Velero's phases: New (waiting for the Backup's "
        "storage location or metadata), FailedValidation (see validationErrors), InProgress "
        "(its VMs and DataDownloads made), WaitingForPluginOperations (waiting for the "
        "DataDownloads and the hooks), then Completed, PartiallyFailed or Failed. Velero's "
        "other phases do not occur here.",
    )
    message: str | None = Field(default=None, description="What the restore does or waits for.")
    validation_errors: list[str] | None = Field(
        default=None,
        alias="validationErrors",
        description="Why the Restore is FailedValidation.",
    )
    failure_reason: str | None = Field(
        default=None, alias="failureReason", description="Why the restore failed as a whole."
    )
    start_timestamp: datetime | None = Field(
        default=None, alias="startTimestamp", description="When the restore started."
    )
    completion_timestamp: datetime | None = Field(
        default=None, alias="completionTimestamp", description="When it ended."
    )
    restore_item_operations_attempted: int | None = Field(
        default=None,
        alias="restoreItemOperationsAttempted",
        description="DataDownloads made (Velero's asynchronous item operations).",
    )
    restore_item_operations_completed: int | None = Field(
        default=None,
        alias="restoreItemOperationsCompleted",
        description="Of them, those Completed.",
    )
    restore_item_operations_failed: int | None = Field(
        default=None,
        alias="restoreItemOperationsFailed",
        description="Of them, those that failed or were cancelled or deleted.",
    )
    hook_status: HookStatus | None = Field(
        default=None, alias="hookStatus", description="The hooks run, and failed."
    )
    warnings: int | None = Field(
        default=None,
        description="Warnings the restore gave: VMs left as they were, hooks failed with "
        "onError Continue.",
    )
    errors: int | None = Field(
        default=None,
        description="Errors the restore met: VMs not restored, hooks failed with onError Fail.",
    )
    progress: RestoreProgress = Field(
        default_factory=RestoreProgress, description="VMs restored of those in the backup."
    )
    virtual_machines: list[RestoredMachine] = Field(
        default_factory=list,
        alias="virtualMachines",
        description="Each VM restored, its disks and their DataDownloads.",
    )


class Restore(Resource):
    """A Backup's VMs and disks made again.

    The manifests are read from the repository (the Backup's location, or without the Backup
    object each location of the Restore's namespace, so a fresh data directory will do); the
    namespaces mapped to are created, and the images taken are made again when missing. Each VM is
    created AlwaysOff (its runPolicy kept in the annotation diskferry.io/restore-run-policy) before
    one DataDownload per disk with data is; the runPolicy is put back once all of them are
    Completed, and left AlwaysOff with a Warning Event when one is not.
    """

    CONDITIONS = RECONCILED_CONDITION

    api_version: ApiVersion = API_VERSION
    kind: Literal["Restore"] = "Restore"
    spec: RestoreSpec
    status: RestoreStatus = Field(default_factory=RestoreStatus)


RESTORES = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="Restore",
    plural="restores",
    model=Restore,
    categories=("diskferry",),
    columns=(
        Column("Backup", ".spec.backupName"),
        Column("Status", ".status.phase"),
        Column("Items", ".status.progress.totalItems", "integer"),
        Column("Restored", ".status.progress.itemsRestored", "integer"),
        Column("Started", ".status.startTimestamp", "date"),
        AGE,
    ),
)
