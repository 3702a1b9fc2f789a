"""DataDownload: one disk snapshot of a repository restored into a new VirtualDisk
(`spec.targetVolume`), at least the snapshot's size or the annotation
`diskferry.io/backup-pvc-size` when that is larger."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from diskferry.control.resources.common import ApiVersion
from diskferry.control.resources.datamover import NODE_OS, MoverSpec, MoverStatus, mover_columns
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
)
from diskferry.control.resources.noeffect import no_effect

BACKUP_PVC_SIZE = "diskferry.io/backup-pvc-size"
INTO_CLAIM = "diskferry.io/restore-into-claim"
"""On a DataDownload: "true" when `targetVolume.pvc` is a claim to make (of the default
StorageClass, the snapshot's size) and restore into, as Velero's DataDownload fills the PVC it
names (a KubeVirt VM's disk, which a Restore makes again under its own name), rather than a new
VirtualDisk. The claim is written over, and kept when the download fails."""
MADE_BY = "diskferry.io/data-download-uid"
"""On a VirtualDisk a DataDownload made to restore into: the download's uid. The disk is not
Ready before the download has Completed."""


class TargetVolume(ApiModel):
    """The VirtualDisk the download creates, and its namespace."""

    pvc: str = Field(
        pattern=NAME_PATTERN, description="The VirtualDisk made and written; it must not exist."
    )
    pv: str | None = no_effect(
        "the disk's volume is the one the daemon makes for the VirtualDisk",
        "The PersistentVolume to write.",
        default=None,
    )
    namespace: str | None = Field(
        default=None,
        pattern=NAME_PATTERN,
        description="The disk's namespace (default the DataDownload's).",
    )


class DataDownloadSpec(MoverSpec):
    """Which snapshot, into which new disk."""

    snapshot_id: str = Field(
        alias="snapshotID",
        min_length=1,
        description="The disk snapshot to restore, by its id in the repository (a DataUpload's "
        "status.disks[].snapshotID, a Backup's status.volumes[].snapshotID). Required.",
    )
    target_volume: TargetVolume = Field(
        alias="targetVolume", description="The VirtualDisk made and written; required."
    )
    snapshot_size: int | None = Field(
        default=None,
        alias="snapshotSize",
        ge=0,
        description="The snapshot's size; the disk is at least this large.",
    )
    node_os: NODE_OS | None = no_effect(
        "the download runs on this host",
        "The OS of the node to run on.",
        default=None,
        alias="nodeOS",
    )


class DataDownloadStatus(MoverStatus):
    """Velero's DataDownload status."""


class DataDownload(Resource):
    """A disk snapshot restored into a new VirtualDisk.

    The disk is the snapshot's size, or the annotation diskferry.io/backup-pvc-size when that is
    larger (smaller is refused); a disk of that name that already exists is refused. The phases,
    the cap on movers (downloads counted apart from uploads), cancel, the timeout and the log are
    as a DataUpload's (the log tagged `downloader log`); a failed or cancelled download deletes the
    disk it made. The DataMoverConfig's bandwidthLimit bounds the bytes each worker writes to the
    disk. The finalizer diskferry.io/data-mover holds a deleted download until its worker has
    stopped (removing its half-written copy) and what it made is removed.
    """

    CONDITIONS = RECONCILED_CONDITION

    api_version: ApiVersion = API_VERSION
    kind: Literal["DataDownload"] = "DataDownload"
    spec: DataDownloadSpec
    status: DataDownloadStatus = Field(default_factory=DataDownloadStatus)


DATA_DOWNLOADS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="DataDownload",
    plural="datadownloads",
    model=DataDownload,
    categories=("diskferry",),
    columns=mover_columns(),
)
