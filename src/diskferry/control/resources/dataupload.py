"""DataUpload: one backup point of all the disks of one VirtualMachine (named by the
annotation `diskferry.io/vm-name`), moved into a BackupStorageLocation's repository."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from diskferry.control.resources.common import ApiVersion
from diskferry.control.resources.datamover import NODE_OS, MoverSpec, MoverStatus, mover_columns
from diskferry.control.resources.kinds import Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
)
from diskferry.control.resources.noeffect import no_effect

VM_NAME = "diskferry.io/vm-name"
FORCE_FULL = "diskferry.io/force-full-backup"
MAX_INCREMENTALS = "diskferry.io/max-incremental-backups"
REQUIRE_QUIESCE = "diskferry.io/require-quiesce"
SKIP_QUIESCE = "diskferry.io/skip-quiesce"
DISKS = "diskferry.io/disks"
"""When given: the comma-separated VirtualDisks of the VM to back up (a Backup's volume policy)."""
HOOKS = "diskferry.io/hooks"
"""When given: a JSON list of the commands run in the running VM's guest through its agent, each
{name, phase: pre|post, command: [path, args...], onError: Continue|Fail, timeout: seconds}
(a Backup's hooks)."""


NO_CSI = "the VM's disks are read at a point its QEMU fixes (CBT), not from a CSI snapshot"
NO_PVC = f"the VM is named by the annotation {VM_NAME}, and all its disks go (or those of {DISKS})"


class CSISnapshotSpec(ApiModel):
    """The CSI snapshot Velero's mover reads."""

    volume_snapshot: str = Field(alias="volumeSnapshot", description="The VolumeSnapshot.")
    storage_class: str = Field(alias="storageClass", description="The PVC's StorageClass.")
    snapshot_class: str | None = Field(
        default=None, alias="snapshotClass", description="The VolumeSnapshotClass used."
    )
    driver: str | None = Field(default=None, description="The snapshot's CSI driver.")


class DataUploadSpec(MoverSpec):
    """What to back up and where: the VM is the annotation's, in `sourceNamespace`."""

    snapshot_type: str | None = no_effect(
        NO_CSI, "The kind of snapshot (CSI).", default=None, alias="snapshotType"
    )
    csi_snapshot: CSISnapshotSpec | None = no_effect(
        NO_CSI, "The CSI snapshot to read.", default=None, alias="csiSnapshot"
    )
    source_pvc: str | None = no_effect(
        NO_PVC, "The PVC the snapshot was taken of.", default=None, alias="sourcePVC"
    )


class DiskUpload(ApiModel):
    """What the upload did for one disk: its snapshot, full or incremental and why, and the
    checkpoint the disk has since."""

    name: str = Field(description="The VirtualDisk.")
    snapshot_id: str = Field(
        alias="snapshotID",
        description="The disk's snapshot in the repository: what a DataDownload's snapshotID "
        "names to restore it.",
    )
    type: Literal["full", "incremental"] = Field(
        description="full (the disk read whole) or incremental (only what changed since its "
        "checkpoint)."
    )
    reason: str = Field(
        description="Why it is full or incremental: no chain yet, a broken chain, "
        "maxIncrementalBackups reached, asked, or no changed-block tracking (naming the label "
        "that turns it on)."
    )
    bytes_read: int = Field(alias="bytesRead", description="Bytes read from the disk.")
    bytes_uploaded: int = Field(
        alias="bytesUploaded",
        description="Bytes written to the repository for the disk: new data, after "
        "deduplication and compression.",
    )
    checkpoint: str | None = Field(
        default=None,
        description="The checkpoint the disk has since, which its next incremental backup "
        "starts from; unset without changed-block tracking.",
    )


class HookRun(ApiModel):
    """How one hook's command ended in the VM's guest."""

    name: str = Field(description="The hook.")
    phase: Literal["pre", "post"] = Field(description="pre: before the point; post: after.")
    exit_code: int | None = Field(
        default=None, alias="exitCode", description="The command's exit code."
    )
    failed: bool = Field(description="Whether it failed (exited other than 0, or ran too long).")
    message: str = Field(description="How it ended.")


class DataUploadStatus(MoverStatus):
    """Velero's DataUpload status, with each disk's snapshot and its full-or-incremental reason."""

    path: str | None = no_effect(
        "never set: the disks are read from their claims, named in status.disks",
        "The path of the snapshot volume read.",
        default=None,
    )
    snapshot_id: str | None = Field(
        default=None, alias="snapshotID", description="The backup's id in the repository."
    )
    incremental_bytes: int | None = Field(
        default=None,
        alias="incrementalBytes",
        ge=0,
        description="Bytes new or changed since the disks' last backup, uploaded.",
    )
    data_mover_result: dict[str, str] | None = no_effect(
        "never set: status.disks has each disk's result",
        "Mover-specific results.",
        default=None,
        alias="dataMoverResult",
    )
    node_os: NODE_OS | None = Field(
        default=None,
        alias="nodeOS",
        description="The OS of the host that moved the data: linux.",
    )
    consistency: str | None = Field(
        default=None,
        description="How the point was taken: `filesystems frozen` (a running VM's guest was "
        "frozen through its agent) or `crash-consistent` (nothing frozen: the VM was stopped, "
        "its agent did not answer, or the annotation diskferry.io/skip-quiesce asked so).",
    )
    disks: list[DiskUpload] = Field(
        default_factory=list, description="Each disk backed up, once the upload Completed."
    )
    hooks: list[HookRun] = Field(
        default_factory=list, description="The hooks run in the VM's guest, in order."
    )


class DataUpload(Resource):
    """A VM's disks moved to a repository at one consistent point.

    Velero's v2alpha1 shape with spec.datamover diskferry (Velero's `velero` and "" name the same
    mover): every disk of the VirtualMachine named by the annotation diskferry.io/vm-name (in
    spec.sourceNamespace) is backed up at one consistent point into spec.backupStorageLocation,
    which must be Available. In the repository the VM is NAMESPACE.NAME and each disk its
    VirtualDisk's name. One active upload per VM: the oldest wins (the uid breaks a tie) and a
    waiting one names it in status.message; one older than the DataMoverConfig's
    staleDataUploadThreshold no longer blocks. At most maxConcurrentDataMovers uploads are
    InProgress at once (downloads counted apart), admitted oldest first.

    Each disk is backed up full or incremental as the repository's chain and the disk's
    checkpoints allow: the annotation diskferry.io/force-full-backup: "true" forces a full that
    leaves the chain usable, and diskferry.io/max-incremental-backups on the VM or the upload
    bounds the incrementals; status.disks and an Event per disk say which and why. A running VM is
    frozen through its guest agent when the agent answers; otherwise the backup is
    crash-consistent with a Warning, unless diskferry.io/require-quiesce: "true" makes that a
    failure (diskferry.io/skip-quiesce: "true" skips the freeze). The hooks that the annotation
    diskferry.io/hooks lists (a Backup's) run in a running VM's guest through its agent
    (guest-exec), pre ones before the point is taken, post ones after; status.hooks and an Event
    each say how they ended. The room the overlays need beside each disk is checked first. A full
    backup that read nothing from a disk holding data is Failed (ZeroData). When operationTimeout
    runs out, counted from Accepted, the worker is stopped and the upload Failed. The
    DataMoverConfig's bandwidthLimit bounds the bytes each worker reads from the disks.

    The worker's last lines go to the daemon's log tagged `data mover log`; a failed worker's files
    stay under DATA_DIR/jobs/failed/ (the ten newest) until the upload is deleted. Each upload
    carries the finalizer diskferry.io/data-mover: deleting one stops its worker (which removes
    its fleecing nodes and files), removes what it made, and only then lets it go.
    """

    CONDITIONS = RECONCILED_CONDITION

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
    columns=mover_columns(
        Column("Incremental Bytes", ".status.incrementalBytes", "integer", priority=10)
    ),
)
