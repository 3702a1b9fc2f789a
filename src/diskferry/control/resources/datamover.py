"""What DataUpload and DataDownload share, in Velero's v2alpha1 shape: phases, progress,
the common spec fields and status, and their print columns."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.kinds import AGE, Column
from diskferry.control.model import NAME_PATTERN, ApiModel, Status
from diskferry.control.resources.common import Duration

DATAMOVER = "diskferry"
"""The `spec.datamover` of the DataUploads and DataDownloads diskferry moves."""


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

    total_bytes: int | None = Field(default=None, alias="totalBytes", ge=0)
    bytes_done: int | None = Field(default=None, alias="bytesDone", ge=0)


class MoverSpec(ApiModel):
    """The spec fields both kinds have."""

    datamover: Literal["diskferry"] = DATAMOVER
    backup_storage_location: str = Field(alias="backupStorageLocation", pattern=NAME_PATTERN)
    source_namespace: str | None = Field(
        default=None, alias="sourceNamespace", pattern=NAME_PATTERN
    )
    data_mover_config: dict[str, str] = Field(default_factory=dict, alias="dataMoverConfig")
    cancel: bool = False
    operation_timeout: Duration | None = Field(default=None, alias="operationTimeout")


class MoverStatus(Status):
    """The status fields both kinds have."""

    phase: MoverPhase | None = None
    message: str | None = None
    start_timestamp: datetime | None = Field(default=None, alias="startTimestamp")
    completion_timestamp: datetime | None = Field(default=None, alias="completionTimestamp")
    accepted_timestamp: datetime | None = Field(default=None, alias="acceptedTimestamp")
    progress: DataMoveOperationProgress = Field(default_factory=DataMoveOperationProgress)
    node: str | None = None
    accepted_by_node: str | None = Field(default=None, alias="acceptedByNode")


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
