"""DataDownload: one disk snapshot restored into a new VirtualDisk (`spec.targetVolume`), or
into the claim it names (`diskferry.io/restore-into-claim`, a KubeVirt VM's disk).

The disk is made blank of the snapshot's size (a backup worker reads it, `dd-<uid>-size`, once:
its job kept until the download ended), or of the annotation
`diskferry.io/backup-pvc-size` when that is larger (a smaller one is refused), labelled with
the download's uid; once its claim is made the restore worker writes the snapshot into it
(replaced whole only on success). The disk stays Provisioning until the download Completed,
so that nothing uses it blank. A download that fails or is cancelled deletes the disk
it made; a disk of that name that it did not make is refused.
"""

from __future__ import annotations

from typing import Any

from diskferry.backup import Chores, ChoresJob, ChoresResult, RestoreJob, RestoreResult
from diskferry.base.errors import DiskferryError
from diskferry.control.reconcilers.datamover.moverlife import (
    Job,
    MoverFailure,
    MoverReconciler,
    Waiting,
)
from diskferry.control.reconcilers.disks.datasources import DISK_CLAIM_LOST, claim_of
from diskferry.control.reconcilers.disks.importjob import SIZE_TOO_SMALL
from diskferry.control.reconcilers.disks.storageclasses import resolve
from diskferry.control.reconcilers.disks.virtualdisk import awaits_restore
from diskferry.control.reconcilers.disks.volumejobs import step
from diskferry.control.reconcilers.velero.repoaccess import Location
from diskferry.control.resources.datadownload import (
    BACKUP_PVC_SIZE,
    DATA_DOWNLOADS,
    INTO_CLAIM,
    MADE_BY,
    DataDownload,
)
from diskferry.control.resources.datamoverconfig import DataMoverConfigSpec
from diskferry.control.resources.model import API_VERSION, ObjectMeta, Reason
from diskferry.control.resources.quantity import format_bytes, parse_quantity
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.runtime.phases import READY
from diskferry.control.runtime.runner.jobs import Failed, Running

SIZE_POLL_SECONDS = 0.25
BAD_SIZE = Reason("BadSize")
TARGET_EXISTS = Reason("TargetExists")
"""How often a download looks at the worker reading its snapshot's size."""


class DataDownloadReconciler(MoverReconciler):
    """Restores each DataDownload's snapshot into the disk it makes."""

    info = DATA_DOWNLOADS
    result_model = RestoreResult
    prefix = "dd"
    log_words = "downloader log"
    running = "the downloader is restoring the disk"

    def who(self, obj: DataDownload) -> str:
        """The target disk, as `VirtualDisk namespace/name`."""
        namespace, name = self._target(obj)
        return f"VirtualDisk {namespace}/{name}"

    def _target(self, obj: DataDownload) -> tuple[str, str]:
        volume = obj.spec.target_volume
        return volume.namespace or obj.metadata.namespace or "default", volume.pvc

    def blocker(self, obj: DataDownload, config: DataMoverConfigSpec) -> str | None:
        """Nothing: downloads wait only for their location and the cap."""
        return None

    def size_job_id(self, obj: DataDownload) -> str:
        """The id of the job that reads the snapshot's size."""
        return f"{self.job_id(obj)}-size"

    def job_ids(self, obj: DataDownload) -> list[str]:
        """The restore's job, and the one that reads the snapshot's size."""
        return [self.job_id(obj), self.size_job_id(obj)]

    def size(self, obj: DataDownload, location: Location) -> int | None:
        """The disk's size: the snapshot's (or `spec.snapshotSize` when larger), or the
        annotation's when larger still; None while a worker reads the snapshot's. The worker's
        job, once it succeeded, is the record of that size until the download ended (see
        `cleanup`): each pass until the restore starts (the claim bound, a mover's slot free)
        reads it there, never again from the repository."""
        snapshot = obj.spec.snapshot_id
        job, files = location.job(ChoresJob, chores=Chores(sizes=[snapshot]))
        job_id = self.size_job_id(obj)
        read = step(self.jobs, job_id, job, ChoresResult, files)
        if isinstance(read, Running):
            return None
        if isinstance(read, Failed):
            self.jobs.settle(job_id, self._log_tag(obj), keep=True)
            raise MoverFailure(read.message, reason=read.reason)
        size = read.result.sizes[snapshot]
        size = max(size, obj.spec.snapshot_size or 0)
        asked = obj.metadata.annotations.get(BACKUP_PVC_SIZE)
        if asked is None:
            return size
        try:
            wanted = parse_quantity(asked)
        except DiskferryError as e:
            raise MoverFailure(f"{BACKUP_PVC_SIZE}: {e.message}", reason=BAD_SIZE) from e
        if wanted < size:
            raise MoverFailure(
                f"{BACKUP_PVC_SIZE} {asked} is smaller than the backed-up disk, "
                f"{format_bytes(size)} ({size} bytes)",
                reason=SIZE_TOO_SMALL,
            )
        return wanted

    def prepare(
        self, obj: DataDownload, location: Location, config: DataMoverConfigSpec
    ) -> Job | Waiting:
        """The restore job, once the disk it made says its claim is made blank and waits for
        this download (a claim in a cluster is ready only after it), or the claim it made can
        be written, with INTO_CLAIM."""
        namespace, name = self._target(obj)
        if obj.metadata.annotations.get(INTO_CLAIM) == "true":
            return self._into_claim(obj, location, config, namespace, name)
        disk = self.client.get(VirtualDisk, namespace, name)
        if disk is None:
            size = self.size(obj, location)
            if size is None:
                message = f"reading the size of the snapshot {obj.spec.snapshot_id}"
                return Waiting(message, SIZE_POLL_SECONDS)
            self.client.create(
                VirtualDisk.model_validate(
                    {
                        "apiVersion": API_VERSION,
                        "kind": "VirtualDisk",
                        "metadata": ObjectMeta(
                            name=name, namespace=namespace, labels={MADE_BY: obj.metadata.uid}
                        ).to_json(),
                        "spec": {"persistentVolumeClaim": {"size": str(size)}},
                    }
                )
            )
            return Waiting(f"waiting for the VirtualDisk {name} to be made")
        if disk.metadata.labels.get(MADE_BY) != obj.metadata.uid:
            raise MoverFailure(
                f"the VirtualDisk {namespace}/{name} exists already: restore into a new disk",
                reason=TARGET_EXISTS,
            )
        claim = claim_of(self.client, self.volumes, disk)
        if (claim is None or not claim.ready) and disk.status.phase == READY:
            raise MoverFailure(
                f"the claim of the VirtualDisk {name} is gone", reason=DISK_CLAIM_LOST
            )
        if claim is None or not awaits_restore(disk):
            return Waiting(f"waiting for the claim of the VirtualDisk {name} to be made")
        job, files = location.job(
            RestoreJob,
            snapshot=obj.spec.snapshot_id,
            target=claim.path,
            format="raw",
            size=claim.size(),
            force=True,
            wait=True,
            bandwidth_limit=config.bandwidth_bytes,
        )
        return Job(job, files, f"the VirtualDisk {name} is ready to be written")

    def _into_claim(
        self,
        obj: DataDownload,
        location: Location,
        config: DataMoverConfigSpec,
        namespace: str,
        name: str,
    ) -> Job | Waiting:
        """The restore job into the claim `name`, made of the snapshot's size in the default
        StorageClass, once a worker can write it."""
        size = self.size(obj, location)
        if size is None:
            message = f"reading the size of the snapshot {obj.spec.snapshot_id}"
            return Waiting(message, SIZE_POLL_SECONDS)
        try:
            claim = self.volumes.claim(resolve(self.client, None), namespace, name, size)
        except DiskferryError as e:
            raise MoverFailure(e.message, reason=e.reason) from e
        if not self.volumes.writable(claim):
            return Waiting(f"waiting for the claim {namespace}/{name} to be bound")
        job, files = location.job(
            RestoreJob,
            snapshot=obj.spec.snapshot_id,
            target=claim.path,
            format="raw",
            size=size,
            force=True,
            wait=True,
            bandwidth_limit=config.bandwidth_bytes,
        )
        return Job(job, files, f"the claim {name} is ready to be written")

    def completed(self, obj: DataDownload, result: RestoreResult) -> dict[str, Any]:
        """The bytes written."""
        return {
            "progress": {"totalBytes": result.size, "bytesDone": result.size},
            "message": f"restored snapshot {result.snapshot} "
            f"({result.bytes_written} bytes written)",
        }

    def cleanup(self, obj: DataDownload, succeeded: bool) -> bool:
        """Settle the job that read the snapshot's size, then delete the disk the download
        made, unless it succeeded; whether both are gone."""
        job_id = self.size_job_id(obj)
        read = self.jobs.poll(job_id, ChoresResult)
        settling = read is not None and not (isinstance(read, Failed) and read.kept)
        if settling and not self.jobs.settle(job_id, self._log_tag(obj), keep=False):
            return False
        if succeeded:
            return True
        namespace, name = self._target(obj)
        disk = self.client.get(VirtualDisk, namespace, name)
        if disk is None or disk.metadata.labels.get(MADE_BY) != obj.metadata.uid:
            return True
        if disk.metadata.deletion_timestamp is None:
            self.client.delete(VirtualDisk, namespace, name)
        return False
