"""A Push VirtualMachineBackup: one DataUpload of its VM into the BackupStorageLocation
`spec.storageLocation`, or KubeVirt's `spec.pvcName` (named `vmbackup-<name>`, owned by the
backup), so that the data mover's limits, one upload per VM, quiescing and the engine's
full-or-incremental choice all apply; its outcome becomes the backup's type, checkpoint,
volumes and conditions. A location not there yet is waited for (Pending, Initializing), as
KubeVirt waits for the PVC. A Full backup's message says why each disk was read whole, and a
tracker the backup gave no checkpoint (its VM's disks have no CBT) gets a Warning saying
why."""

from __future__ import annotations

from typing import Any

from diskferry.control.clock import Clock
from diskferry.control.reconcilers.kvbackup.vmbackupstate import (
    BackupFailure,
    Source,
    advance,
    move,
    quiesced,
)
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.datamover import MoverPhase
from diskferry.control.resources.dataupload import FORCE_FULL, SKIP_QUIESCE, VM_NAME, DataUpload
from diskferry.control.resources.model import API_VERSION, ObjectMeta, OwnerReference, Reason
from diskferry.control.resources.vmbackup import BackupPhase, BackupType, VirtualMachineBackup
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result

POLL_SECONDS = 1.0
WAIT_SECONDS = 2.0
UPLOAD_PREFIX = "vmbackup-"
DATA_UPLOAD_DELETED = Reason("DataUploadDeleted")
DATA_UPLOAD_FAILED = Reason("DataUploadFailed")


def upload_name(obj: VirtualMachineBackup) -> str:
    """The name of the backup's DataUpload."""
    return f"{UPLOAD_PREFIX}{obj.metadata.name}"


def why_full(disks: list[dict[str, Any]]) -> str:
    """Why each disk backed up in full was, as its DataUpload says."""
    whole: dict[str, list[str]] = {}
    for disk in disks:
        if disk.get("type") == "full":
            whole.setdefault(disk.get("reason") or "", []).append(disk["name"])
    return "; ".join(
        f"{'disks' if len(names) > 1 else 'disk'} {', '.join(names)}: {reason}"
        for reason, names in whole.items()
    )


def push_type(disks: list[dict[str, Any]]) -> BackupType:
    """Incremental when every disk was, Full otherwise."""
    incremental = bool(disks) and all(d.get("type") == "incremental" for d in disks)
    return BackupType.INCREMENTAL if incremental else BackupType.FULL


class PushBackup:
    """Moves a Push backup through its DataUpload."""

    def __init__(self, client: Client, clock: Clock) -> None:
        self.client = client
        self.clock = clock

    def step(self, obj: VirtualMachineBackup, source: Source) -> Result:
        """Create the upload, or follow it to its end."""
        name = upload_name(obj)
        upload = self.client.get(DataUpload, obj.metadata.namespace, name)
        if upload is None and obj.status.data_upload_name == name:
            # made before the status named it: deleted since, not to be made again
            raise BackupFailure(f"DataUpload {name} was deleted", reason=DATA_UPLOAD_DELETED)
        if upload is None:
            location = obj.spec.location
            if self.client.get(BackupStorageLocation, obj.metadata.namespace, location) is None:
                given = "storageLocation" if obj.spec.storage_location else "pvcName"
                message = f"waiting for the BackupStorageLocation {location} ({given}) to exist"
                move(self.client, obj, BackupPhase.PENDING, "Initializing", message)
                return Result.requeue(WAIT_SECONDS)
            self._create(obj, source, name)
            message = f"backing up VirtualMachine {source.name} through DataUpload {name}"
            fields = {"dataUploadName": name}
            move(self.client, obj, BackupPhase.PROGRESSING, "Initiated", message, fields)
            return Result.requeue(POLL_SECONDS)
        phase = upload.status.phase
        if phase in (MoverPhase.FAILED, MoverPhase.CANCELED):
            said = upload.status.message or f"the DataUpload {name} is {phase}"
            raise BackupFailure(said, reason=DATA_UPLOAD_FAILED)
        if phase != MoverPhase.COMPLETED:
            message = upload.status.message or f"DataUpload {name} is {phase or 'new'}"
            move(self.client, obj, BackupPhase.PROGRESSING, "Initiated", message)
            return Result.requeue(POLL_SECONDS)
        return self._complete(obj, source, upload)

    def _create(self, obj: VirtualMachineBackup, source: Source, name: str) -> None:
        annotations = {VM_NAME: source.name}
        if source.since is None:
            annotations[FORCE_FULL] = "true"
        if obj.spec.skip_quiesce:
            annotations[SKIP_QUIESCE] = "true"
        owner = OwnerReference(
            apiVersion=API_VERSION,
            kind=obj.kind,
            name=obj.metadata.name or "",
            uid=obj.metadata.uid or "",
            controller=True,
            blockOwnerDeletion=True,
        )
        meta = ObjectMeta(
            name=name,
            namespace=obj.metadata.namespace,
            annotations=annotations,
            ownerReferences=[owner],
        )
        body = {
            "apiVersion": API_VERSION,
            "kind": "DataUpload",
            "metadata": meta.to_json(),
            "spec": {"backupStorageLocation": obj.spec.location},
        }
        self.client.create(DataUpload.model_validate(body))

    def _complete(self, obj: VirtualMachineBackup, source: Source, upload: DataUpload) -> Result:
        disks = [d.to_json() for d in upload.status.disks]
        checkpoint = next((d.get("checkpoint") for d in disks if d.get("checkpoint")), None)
        volumes = [d["name"] for d in disks]
        targets = source.targets()
        conditions = quiesced(obj, obj.spec.skip_quiesce, upload.status.consistency)
        obj = self.client.patch_status(obj, {"conditions": conditions})
        advance(self.client, obj, source, checkpoint, volumes, self.clock.now())
        full = why_full(disks)
        if checkpoint is None and source.tracker is not None:
            said = f"VirtualMachineBackup {obj.metadata.name} made no checkpoint: {full}"
            self.client.event(source.tracker, "Warning", "NoCheckpoint", said)
        fields = {
            "type": push_type(disks).value,
            "checkpointName": checkpoint,
            "snapshotID": upload.status.snapshot_id,
            "includedVolumes": [
                {"volumeName": v, **({"diskTarget": targets[v]} if v in targets else {})}
                for v in volumes
            ],
        }
        message = upload.status.message or "the backup is in the repository"
        if full:
            message = f"{message}: {full}"
        move(self.client, obj, BackupPhase.COMPLETE, "Completed", message, fields)
        return Result.done()
