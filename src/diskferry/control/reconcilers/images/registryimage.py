"""Images kept in the image store: a VirtualImage with `storage: ContainerRegistry` (the
default) and every ClusterVirtualImage.

Where the host has no image store (see `host.images`), the image fails at once with the
reason ImageStoreUnavailable.

Pending (waiting for its source; its spec may still change) -> Provisioning (written before
a worker starts: a `push` worker imports the source and stores it as a containerDisk in
DATA_DIR/images; the claim of a disk, a snapshot or an image is stored as qcow2, so the
image keeps what the claim has allocated, not its whole size) ->
Ready with `status.size {stored, unpacked}`, `format`, `cdrom` and `status.target.registryURL`
(the image's `oci:` reference), or Failed with the worker's reason. An Upload source first
waits in WaitForUserUpload for an upload server worker to take the upload into a staging file,
which the push then stores. A Ready image whose store entry went missing is ImageLost.
Deleting it stops its workers and removes its image and staging file, once no VirtualMachine
holds it (see `protection`).
"""

from __future__ import annotations

import logging
from typing import Any

from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.images import ImageStore, ImageStoreUnavailableError
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import Claim, Volumes
from diskferry.control.reconcilers.disks.claimlife import (
    PENDING,
    POLL_SECONDS,
    PROVISIONING,
    WAIT_SECONDS,
    WAITING_FOR_SOURCE,
    show_upload_wait,
)
from diskferry.control.reconcilers.disks.datasources import Waiting, resolve_source
from diskferry.control.reconcilers.disks.importjob import (
    IMPORT_FAILED,
    Imports,
    Outcome,
    Source,
    advised,
    source_files,
)
from diskferry.control.reconcilers.disks.protection import hold_back, protect
from diskferry.control.reconcilers.disks.teardown import STOP_POLL
from diskferry.control.reconcilers.disks.uploads import UPLOAD_TIMED_OUT, timed_out, upload_policy
from diskferry.control.resources.common import DataSource
from diskferry.control.resources.duration import DurationError
from diskferry.control.resources.model import Reason, Resource
from diskferry.control.resources.quantity import format_bytes
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting, held, release
from diskferry.control.runtime.phases import (
    FAILED,
    READY,
    TERMINATING,
    begin,
    status_of,
    transition,
)
from diskferry.control.runtime.progress import ProgressWrites, progress_fields
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Running, Succeeded
from diskferry.importer import ImagePushJob, ImagePushResult

log = logging.getLogger("diskferry.control")
IMAGE_LOST = Reason("ImageLost")


class StoredImages:
    """Reconciles the images of one kind (`prefix` vi or cvi) kept in the store."""

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        store: ImageStore,
        prefix: str,
        certs: ServerCerts | None = None,
        proxy: ExportProxy | None = None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.volumes = volumes
        self.store = store
        self.prefix = prefix
        self.imports = Imports(runner, certs, proxy)
        self.progress = ProgressWrites()
        self.staging = store.staging

    def job_id(self, obj: Resource) -> str:
        """The id of the image's push job."""
        return f"{self.prefix}-{obj.metadata.uid}"

    def upload_job_id(self, obj: Resource) -> str:
        """The id of the image's upload server job (for an Upload source)."""
        return f"{self.prefix}-upload-{obj.metadata.uid}"

    def reference(self, obj: Resource) -> str:
        """Where the image is kept: its `oci:` reference in the store."""
        return self.store.reference(obj)

    def _staged(self, obj: Resource) -> Claim:
        return self.volumes.claim(self.staging, self.prefix, obj.metadata.uid or "", 0)

    def reconcile(self, obj: Any, data_source: DataSource, namespace: str | None) -> Result:
        """One step of the image's life; its sources are looked up in `namespace`."""
        obj, holding = protect(self.client, obj)
        if deleting(obj) and holding:
            return hold_back(self.client, obj, holding)
        if deleting(obj):
            return self._terminate(obj)
        obj = held(self.client, obj)
        status = status_of(obj)
        phase = status.get("phase")
        settled = status.get("observedGeneration") == obj.metadata.generation
        if phase in (READY, IMAGE_LOST) or (settled and phase == FAILED):
            return self._settled(obj, phase)
        unavailable = self.store.unavailable()
        if unavailable is not None:
            failed = Outcome(False, reason=ImageStoreUnavailableError.reason, message=unavailable)
            return self._fail(obj, failed, self.job_id(obj))
        if phase is None:
            obj = transition(self.client, obj, PENDING, PENDING, "waiting to be provisioned")
        found = resolve_source(self.client, self.volumes, self.store, namespace, data_source)
        if isinstance(found, Waiting):
            transition(self.client, obj, PENDING, WAITING_FOR_SOURCE, found.message)
            return Result.requeue(WAIT_SECONDS)
        target = {"target": {"registryURL": self.reference(obj)}}
        begun = begin(self.client, obj, "starting its worker", target)
        if begun is None:
            return Result.done()
        obj, source = begun, found
        if found.upload:
            staged = self._staged(obj)
            try:
                policy = upload_policy(obj)
            except DurationError as e:
                transition(self.client, obj, FAILED, e.reason, e.message)
                return Result.done()
            outcome = self.imports.step(self.upload_job_id(obj), staged, found, None, policy)
            late = timed_out(obj, policy) if outcome.waiting_for_upload else None
            if late is not None:
                failed = Outcome(False, reason=UPLOAD_TIMED_OUT, message=late)
                self._fail(obj, failed, self.upload_job_id(obj))
                return Result.requeue(POLL_SECONDS)
            if outcome.waiting_for_upload or outcome.running:
                return self._uploading(obj, outcome)
            if outcome.failed:
                return self._fail(obj, outcome, self.upload_job_id(obj))
            source = Source(staged.path)
        outcome = self._push(obj, source)
        if outcome.running:
            fields = self._progress(obj, outcome)
            message = "storing its source in the image store"
            transition(self.client, obj, PROVISIONING, PROVISIONING, message, fields)
            return Result.requeue(POLL_SECONDS)
        if outcome.failed:
            return self._fail(obj, outcome, self.job_id(obj))
        fields = self.ready_fields(obj, outcome.result or {})
        transition(self.client, obj, READY, READY, "the image is in the image store", fields)
        return Result.done() if self._finish(obj, keep=False) else Result.requeue(STOP_POLL)

    def _progress(self, obj: Resource, outcome: Outcome) -> dict[str, Any]:
        """The status fields of a running job: where the image goes, and its progress when
        that is due."""
        fields = {"target": {"registryURL": self.reference(obj)}, **(outcome.fields or {})}
        return self.progress.fields(obj.metadata.uid or "", status_of(obj), fields)

    def _uploading(self, obj: Any, outcome: Outcome) -> Result:
        fields = self._progress(obj, outcome)
        if outcome.waiting_for_upload:
            show_upload_wait(self.client, obj, fields, outcome)
        else:
            transition(self.client, obj, PROVISIONING, PROVISIONING, "importing the upload", fields)
        return Result.requeue(POLL_SECONDS)

    def _push(self, obj: Resource, source: Source) -> Outcome:
        """Start the push if it was not, else tell how it is going."""
        job_id = self.job_id(obj)
        polled = self.imports.jobs.poll(job_id, ImagePushResult)
        if polled is None:
            fields, files = source_files(source)
            # a raw claim: a tar of it would hold every byte of its size
            stored = "qcow2" if source.local_file else None
            job = ImagePushJob(
                source=source.location,
                reference=self.reference(obj),
                checksum=source.checksum,
                store_format=stored,
                **fields,
            )
            self.imports.jobs.start(job_id, job, files)
            return Outcome(True, progress_fields({}))
        if isinstance(polled, Running):
            return Outcome(True, progress_fields(polled.progress) if polled.progress else None)
        if isinstance(polled, Succeeded):
            return Outcome(False, result=polled.result.to_json())
        reason, message = advised(polled)
        return Outcome(False, reason=reason, message=message)

    def ready_fields(self, obj: Resource, result: dict[str, Any]) -> dict[str, Any]:
        """Sizes stored and unpacked, the format, CD-ROM or not, and where the image is."""
        stored, unpacked = int(result.get("storedSize") or 0), int(result.get("unpackedSize") or 0)
        return {
            "progress": "100%",
            "size": {
                "stored": format_bytes(stored),
                "storedBytes": str(stored),
                "unpacked": format_bytes(unpacked),
                "unpackedBytes": str(unpacked),
            },
            "format": result.get("format") or "raw",
            "cdrom": result.get("sourceFormat") == "iso",
            "target": {"registryURL": self.reference(obj)},
        }

    def _fail(self, obj: Any, outcome: Outcome, job_id: str) -> Result:
        reason, message = outcome.reason or IMPORT_FAILED, outcome.message or ""
        log.warning("%s failed: %s: %s", tag(obj), reason, message)
        transition(self.client, obj, FAILED, reason, message)
        self.imports.finish(job_id, tag(obj), keep=True)
        return Result.done()

    def _finish(self, obj: Resource, keep: bool) -> bool:
        """Settle both jobs and drop the staging file; False while a job still runs."""
        done = self.imports.finish(self.job_id(obj), tag(obj), keep=keep)
        done = self.imports.settle(self.upload_job_id(obj), keep=keep) and done
        if done and not keep:
            self.volumes.remove(self.staging, self.prefix, obj.metadata.uid or "")
        return done

    def _settled(self, obj: Any, phase: str) -> Result:
        if not self._finish(obj, keep=phase == FAILED):
            return Result.requeue(STOP_POLL)
        if phase == READY and not self.store.holds(self.reference(obj)):
            transition(self.client, obj, IMAGE_LOST, IMAGE_LOST, "the image store lost the image")
        elif phase == READY:
            fields = {"target": {"registryURL": self.reference(obj)}}
            transition(self.client, obj, READY, READY, "the image is in the image store", fields)
        return Result.done()

    def _terminate(self, obj: Any) -> Result:
        if status_of(obj).get("phase") != TERMINATING:
            obj = transition(self.client, obj, TERMINATING, TERMINATING, "being deleted")
        stopped = self.imports.stop(self.job_id(obj))
        if not (self.imports.stop(self.upload_job_id(obj)) and stopped):
            return Result.requeue(STOP_POLL)
        self.store.remove(self.reference(obj))
        self.volumes.remove(self.staging, self.prefix, obj.metadata.uid or "")
        release(self.client, obj)
        return Result.done()
