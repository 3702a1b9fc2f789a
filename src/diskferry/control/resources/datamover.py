"""What DataUpload and DataDownload share, in Velero's v2alpha1 shape: phases, progress,
the common spec fields and status, and their print columns."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.resources.common import Duration
from diskferry.control.resources.kinds import AGE, Column
from diskferry.control.resources.model import NAME_PATTERN, ApiModel, Status
from diskferry.control.resources.noeffect import no_effect

DATAMOVER = "diskferry"
"""The `spec.datamover` of the DataUploads and DataDownloads diskferry makes; Velero's `velero`
and `""` (its built-in mover) name diskferry's too."""
NODE_OS = Literal["auto", "linux", "windows"]


class MoverPhase(StrEnum):
    """Where a data mover's job is, as Velero names it."""

    NEW = "New"
    ACCEPTED = "Accepted"
    PREPARED = "Prepared"
    IN_PROGRESS = "InProgress"
    CANCELING = "Canceling"
    CANCELED = "Canceled"
    COMPLETED = "Completed"
    FAILED = "Failed"


ENDED = (MoverPhase.COMPLETED, MoverPhase.FAILED, MoverPhase.CANCELED)


class DataMoveOperationProgress(ApiModel):
    """Bytes moved of the total."""

    total_bytes: int | None = Field(
        default=None, alias="totalBytes", ge=0, description="Bytes to move."
    )
    bytes_done: int | None = Field(
        default=None, alias="bytesDone", ge=0, description="Bytes moved."
    )


class MoverSpec(ApiModel):
    """The spec fields both kinds have."""

    datamover: Literal["diskferry", "velero", ""] = Field(
        default=DATAMOVER,
        description='Who moves the data: diskferry (the default), or velero and "" as Velero '
        "writes its built-in mover, which here is diskferry's; no other mover is here.",
    )
    backup_storage_location: str = Field(
        alias="backupStorageLocation",
        pattern=NAME_PATTERN,
        description="The BackupStorageLocation of the repository, in the same namespace; it "
        "must be Available.",
    )
    source_namespace: str | None = Field(
        default=None,
        alias="sourceNamespace",
        pattern=NAME_PATTERN,
        description="The namespace of what is moved (the VM backed up, the disk restored "
        "from). Default the object's namespace.",
    )
    data_mover_config: dict[str, str] = no_effect(
        "diskferry's mover takes its settings from the DataMoverConfig and the annotations "
        "diskferry.io/*",
        "Mover-specific settings.",
        default_factory=dict,
        alias="dataMoverConfig",
    )
    cancel: bool = Field(default=False, description="true: stop the mover, in any phase.")
    operation_timeout: Duration | None = Field(
        default=None,
        alias="operationTimeout",
        description="How long the mover may take from its acceptance; then its worker is "
        "stopped and it is Failed. Default the DataMoverConfig's operationTimeout (4h).",
    )


class MoverStatus(Status):
    """The status fields both kinds have."""

    phase: MoverPhase | None = Field(
        default=None,
        description="Where the mover is, as Velero names it: New, Accepted (its storage "
        "location is Available; for an upload, it is its VM's active one), Prepared (waiting "
        "for a slot under maxConcurrentDataMovers), InProgress (its worker moves the data), "
        "Completed, Failed (message says why), Canceling then Canceled (after spec.cancel).",
    )
    message: str | None = Field(default=None, description="What it does or waits for, or why.")
    start_timestamp: datetime | None = Field(
        default=None, alias="startTimestamp", description="When its worker started."
    )
    completion_timestamp: datetime | None = Field(
        default=None, alias="completionTimestamp", description="When it ended."
    )
    accepted_timestamp: datetime | None = Field(
        default=None, alias="acceptedTimestamp", description="When it was accepted."
    )
    progress: DataMoveOperationProgress = Field(
        default_factory=DataMoveOperationProgress, description="Bytes moved of the total."
    )
    node: str | None = Field(
        default=None, description="The host that moves the data: this daemon's host."
    )
    accepted_by_node: str | None = Field(
        default=None, alias="acceptedByNode", description="The host that accepted it."
    )


def mover_columns(*extra: Column) -> tuple[Column, ...]:
    """Velero's print columns, with `extra` after Total Bytes."""
    return (
        Column("Status", ".status.phase", description="Data mover phase"),
        Column("Started", ".status.startTimestamp", "date"),
        Column("Bytes Done", ".status.progress.bytesDone", "integer"),
        Column("Total Bytes", ".status.progress.totalBytes", "integer"),
        *extra,
        Column("Storage Location", ".spec.backupStorageLocation"),
        AGE,
        Column("Node", ".status.node"),
    )
