"""Restore: Velero's shape — the VirtualMachines and VirtualDisks of a Backup re-created from
the repository's manifests, each disk by a DataDownload, namespaces mapped as asked."""

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

RESTORE_NAME = "diskferry.io/restore-name"
"""The label of a Restore's DataDownloads."""
RUN_POLICY = "diskferry.io/restore-run-policy"
"""On a VM being restored: the runPolicy it is given back once all its disks are."""


class RestoreSpec(ApiModel):
    """Which backup, which of its namespaces (all when empty), and where each goes."""

    backup_name: str = Field(alias="backupName", pattern=NAME_PATTERN)
    included_namespaces: list[str] = Field(default_factory=list, alias="includedNamespaces")
    namespace_mapping: dict[str, str] = Field(default_factory=dict, alias="namespaceMapping")


class RestorePhase(StrEnum):
    """Velero's Restore phases."""

    NEW = "New"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    PARTIALLY_FAILED = "PartiallyFailed"
    FAILED = "Failed"


class RestoredDisk(ApiModel):
    """One disk of a restored VM: its snapshot and its DataDownload's phase."""

    name: str
    snapshot_id: str = Field(alias="snapshotID")
    data_download: str = Field(alias="dataDownload")
    phase: str | None = None
    message: str | None = Field(
        default=None, description="Why the disk was not restored, once its DataDownload ended."
    )


class RestoredMachine(ApiModel):
    """One VM restored: where, the runPolicy it gets back, its disks."""

    namespace: str
    name: str
    run_policy: str = Field(alias="runPolicy")
    phase: Literal["Restoring", "Completed", "Failed"] = "Restoring"
    disks: list[RestoredDisk] = Field(default_factory=list)


class RestoreProgress(ApiModel):
    """VMs restored of those in the backup."""

    total_items: int = Field(default=0, alias="totalItems")
    items_restored: int = Field(default=0, alias="itemsRestored")


class RestoreStatus(Status):
    """Where the restore is, each VM, and the counts."""

    phase: RestorePhase | None = None
    message: str | None = None
    start_timestamp: str | None = Field(default=None, alias="startTimestamp")
    completion_timestamp: str | None = Field(default=None, alias="completionTimestamp")
    progress: RestoreProgress = Field(default_factory=RestoreProgress)
    virtual_machines: list[RestoredMachine] = Field(default_factory=list, alias="virtualMachines")


class Restore(Resource):
    """A Backup's VMs and disks made again."""

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
