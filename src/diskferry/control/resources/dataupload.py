"""DataUpload: one backup point of all the disks of one VirtualMachine (named by the
annotation `diskferry.io/vm-name`), moved into a BackupStorageLocation's repository."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from diskferry.control.kinds import Column, KindInfo
from diskferry.control.model import API_VERSION, GROUP, VERSION, ApiModel, Resource
from diskferry.control.resources.common import ApiVersion
from diskferry.control.resources.datamover import MoverSpec, MoverStatus, mover_columns

VM_NAME = "diskferry.io/vm-name"
FORCE_FULL = "diskferry.io/force-full-backup"
MAX_INCREMENTALS = "diskferry.io/max-incremental-backups"
REQUIRE_QUIESCE = "diskferry.io/require-quiesce"
SKIP_QUIESCE = "diskferry.io/skip-quiesce"
DISKS = "diskferry.io/disks"
"""When given: the comma-separated VirtualDisks of the VM to back up (a Backup's volume policy)."""


class DataUploadSpec(MoverSpec):
    """What to back up and where: the VM is the annotation's, in `sourceNamespace`."""

    snapshot_type: str | None = Field(default=None, alias="snapshotType")
    source_pvc: str | None = Field(default=None, alias="sourcePVC")


class DiskUpload(ApiModel):
    """What the upload did for one disk: its snapshot, full or incremental and why, and the
    checkpoint the disk has since."""

    name: str
    snapshot_id: str = Field(alias="snapshotID")
    type: Literal["full", "incremental"]
    reason: str
    bytes_read: int = Field(alias="bytesRead")
    bytes_uploaded: int = Field(alias="bytesUploaded")
    checkpoint: str | None = None


class DataUploadStatus(MoverStatus):
    """Velero's DataUpload status, with each disk's snapshot and its full-or-incremental reason."""

    path: str | None = None
    snapshot_id: str | None = Field(default=None, alias="snapshotID")
    incremental_bytes: int | None = Field(default=None, alias="incrementalBytes", ge=0)
    data_mover_result: dict[str, str] | None = Field(default=None, alias="dataMoverResult")
    consistency: str | None = None
    disks: list[DiskUpload] = Field(default_factory=list)


class DataUpload(Resource):
    """A VM's disks moved to a repository at one consistent point."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["DataUpload"] = "DataUpload"
    spec: DataUploadSpec
    status: DataUploadStatus = Field(default_factory=DataUploadStatus)


DATA_UPLOADS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="DataUpload",
    plural="datauploads",
    model=DataUpload,
    categories=("diskferry",),
    columns=mover_columns(Column("Incremental Bytes", ".status.incrementalBytes", "integer")),
)
