"""The reconcile of an object that is a claim filled by an import: VirtualDisk and VirtualImage.

Pending (waiting for its StorageClass or its source; its spec may still change) ->
Provisioning (written before its claim is made: the import worker runs, its /progress copied
into status; a file claim from another claim is a reflink clone where the filesystem allows,
and where the claims may be on different nodes (a cluster's) the other claim is read over NBD
from a worker serving it beside its claim, removed however the copy ends;
an Upload source waits in WaitForUserUpload, its upload server's URLs in `imageUploadURLs`,
until an upload begins) -> Ready, or Failed with the worker's reason and message; a larger
size asked of a Ready claim is Resizing (its storage expanded where the host must, a PVC's,
then its disk grown by a worker where the disk is a file), then Ready again; a smaller one,
or one its class may not grow to, leaves it Ready, its Ready condition and a Warning Event
saying why; each change an Event. A finalizer
holds the object while it is Terminating, until its worker is stopped, its claim and its
worker's files removed; one more while a VirtualMachine holds it (see `protection`), whose
deletion waits for the VM to stop. A kind gives the few parts that differ (`ClaimedKind`'s
hooks); all the rest is here, once.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.images import ImageStore
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import (
    Claim,
    ExpansionRefusedError,
    VolumeClass,
    VolumeError,
    Volumes,
)
from diskferry.control.reconcilers.disks.datasources import (
    Waiting,
    claim_name,
    claim_of,
    resolve_source,
)
from diskferry.control.reconcilers.disks.importjob import (
    IMPORT_FAILED,
    Imports,
    Outcome,
    Source,
    source_files,
)
from diskferry.control.reconcilers.disks.protection import hold_back, protect
from diskferry.control.reconcilers.disks.storageclasses import StorageClassError, resolve
from diskferry.control.reconcilers.disks.teardown import terminate
from diskferry.control.reconcilers.disks.uploads import UPLOAD_TIMED_OUT, timed_out, upload_policy
from diskferry.control.reconcilers.disks.volumejobs import (
    BLANK,
    GROW,
    PROBE,
    REFLINK,
    blank_job,
    grow_job,
    reflink_job,
    step,
    volume_job_id,
)
from diskferry.control.resources.common import DataSource
from diskferry.control.resources.duration import DurationError, format_duration
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import Reason, Resource
from diskferry.control.resources.quantity import format_bytes
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import find, set_condition
from diskferry.control.runtime.finalizer import deleting, held
from diskferry.control.runtime.phases import (
    FAILED,
    PENDING,
    PROVISIONING,
    READY,
    begin,
    status_of,
    transition,
    update_fields,
)
from diskferry.control.runtime.progress import ProgressWrites
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Running
from diskferry.disk.urls import http_url_for_message
from diskferry.importer import ProbeJob, ProbeResult, ReflinkResult, VolumeResult

log = logging.getLogger("diskferry.control")
PVC_LOST = Reason("PVCLost")
RESIZING = Reason("Resizing")
SHRINK_REFUSED = Reason("ShrinkNotAllowed")
EXPANSION_REFUSED = Reason(ExpansionRefusedError.reason)
EXPANSION_TIMED_OUT = Reason("ExpansionTimedOut")
REFUSALS = (SHRINK_REFUSED, EXPANSION_REFUSED, EXPANSION_TIMED_OUT)
EXPANSION_SECONDS = 600.0
"""How long a claim's storage may take to expand before its object says it is late."""
REFUSED_SECONDS = 60.0
WAIT_FOR_USER_UPLOAD = Reason("WaitForUserUpload")
WAITING_FOR_SOURCE = Reason("WaitingForDataSource")
SIZE_REQUIRED = Reason("SizeRequired")
POLL_SECONDS = 1.0
WAIT_SECONDS = 2.0
SIZE_REQUIRED = "SizeRequired"


class ResizeError(DiskferryError):
    """The worker could not grow a claim: tried again later."""

    reason = "ResizeFailed"


@dataclass(frozen=True)
class Filling:
    """Another fills a blank claim (a restore): why its object is not Ready yet, or failed."""

    reason: str
    message: str
    failed: bool = False


def ready_condition(obj: Resource) -> dict[str, Any]:
    """The object's Ready condition as its status shows it, empty while it has none."""
    return find(status_of(obj).get("conditions") or [], READY) or {}


def resizing_for(obj: Resource) -> float:
    """Seconds since the object's Ready condition last changed: how long a Resizing object has
    been resizing."""
    since = ready_condition(obj).get("lastTransitionTime")
    if not since:
        return 0.0
    return (datetime.now(UTC) - datetime.fromisoformat(since)).total_seconds()


def age(obj: Resource) -> str:
    """Time since the object was created, as a Go duration rounded to the second."""
    now = datetime.now(UTC)
    created = obj.metadata.creation_timestamp or now
    return format_duration(timedelta(seconds=round((now - created).total_seconds())))


def show_upload_wait(
    client: Client, obj: Resource, fields: dict[str, Any], outcome: Outcome
) -> None:
    """WaitForUserUpload with `imageUploadURLs` once the upload server listens, Provisioning
    before that."""
    if outcome.upload_urls:
        message = "waiting for the user upload"
        fields = {**fields, "imageUploadURLs": outcome.upload_urls}
        transition(client, obj, WAIT_FOR_USER_UPLOAD, WAIT_FOR_USER_UPLOAD, message, fields)
    else:
        message = "waiting for the upload server to be ready"
        transition(client, obj, PROVISIONING, PROVISIONING, message, fields)


class ClaimedKind(ABC):
    """Reconciles one kind whose objects are claims filled by an import."""

    info: KindInfo
    prefix = ""

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        store: ImageStore,
        certs: ServerCerts | None = None,
        proxy: ExportProxy | None = None,
    ) -> None:
        self.client = client
        self.volumes = volumes
        self.store = store
        self.imports = Imports(runner, certs, proxy, served_claims=not volumes.shared_host())
        self.jobs = Jobs(runner)
        self.progress = ProgressWrites()

    @abstractmethod
    def storage_class_name(self, obj: Any) -> str | None:
        """The StorageClass the object's claim asks for, None for the default."""

    @abstractmethod
    def size(self, obj: Any) -> int | None:
        """The claim's size in bytes, None when the image decides it."""

    @abstractmethod
    def data_source(self, obj: Any) -> DataSource | None:
        """Where the data comes from, None for a blank claim."""

    @abstractmethod
    def ready_fields(self, obj: Any, claim: Claim, result: dict[str, Any]) -> dict[str, Any]:
        """The status fields of the object once its claim is filled."""

    def resized_fields(self, obj: Any, claim: Claim) -> dict[str, Any]:
        """The status fields that change when the claim grows."""
        return {}

    def waited_fields(self, obj: Any) -> dict[str, Any]:
        """The status fields that say how long the object waited for its source."""
        return {}

    def filled_elsewhere(self, obj: Any) -> Filling | None:
        """What else fills the object's blank claim before it may be Ready, None when nothing
        does (or it is done)."""
        return None

    def _waited(self, obj: Resource) -> bool:
        """Whether the object was waiting for its data source until now."""
        reason = ready_condition(obj).get("reason")
        return status_of(obj).get("phase") == PENDING and reason == WAITING_FOR_SOURCE

    def job_id(self, obj: Resource) -> str:
        """The id of the object's import job."""
        return f"{self.prefix}-{obj.metadata.uid}"

    def volume_job_id(self, obj: Resource, what: str) -> str:
        """The id of the object's `what` job (blank, grow, reflink)."""
        return volume_job_id(self.prefix, what, obj.metadata.uid)

    def job_ids(self, obj: Resource) -> list[str]:
        """The ids of every job the object may have: its import's, then its volume jobs'."""
        volume_jobs = (BLANK, GROW, REFLINK, PROBE)
        return [self.job_id(obj), *(self.volume_job_id(obj, what) for what in volume_jobs)]

    def claim_fields(self, volume_class: VolumeClass, obj: Resource) -> dict[str, Any]:
        """Where the object's data lives, as status shows it (the daemon never reads it back)."""
        return {
            "storageClassName": volume_class.name,
            "target": {"persistentVolumeClaimName": claim_name(obj)},
        }

    def reconcile(self, obj: Any) -> Result:
        """One step of the object's life."""
        obj, holding = protect(self.client, obj)
        if deleting(obj) and holding:
            return hold_back(self.client, obj, holding)
        if deleting(obj):
            try:
                wanted = resolve(self.client, self.storage_class_name(obj))
            except StorageClassError:
                wanted = None
            job_ids = self.job_ids(obj)
            return terminate(self.client, self.volumes, self.imports, obj, job_ids, wanted)
        obj = held(self.client, obj)
        status = status_of(obj)
        phase = status.get("phase")
        settled = status.get("observedGeneration") == obj.metadata.generation
        refused = ready_condition(obj).get("reason") in REFUSALS
        if settled and phase in (READY, FAILED, PVC_LOST) and not refused:
            return self._settled(obj, phase)
        if phase in (READY, RESIZING):
            return self._resize(obj)
        if phase is None:
            obj = transition(self.client, obj, PENDING, PENDING, "waiting to be provisioned")
        try:
            volume_class = resolve(self.client, self.storage_class_name(obj))
        except StorageClassError as e:
            transition(self.client, obj, PENDING, e.reason, e.message)
            return Result.requeue(WAIT_SECONDS)
        data_source = self.data_source(obj)
        source = None
        if data_source is not None:
            namespace = obj.metadata.namespace
            found = resolve_source(self.client, self.volumes, self.store, namespace, data_source)
            if isinstance(found, Waiting):
                transition(self.client, obj, PENDING, WAITING_FOR_SOURCE, found.message)
                return Result.requeue(WAIT_SECONDS)
            source = found
        return self._provision(obj, volume_class, source)

    def _provision(self, obj: Any, volume_class: VolumeClass, source: Source | None) -> Result:
        size = self.size(obj) or (source.size if source else None)
        if size is None and (volume_class.block or source is None):
            return self._fail(
                obj,
                SIZE_REQUIRED,
                f"a claim of the block StorageClass {volume_class.name} needs "
                "persistentVolumeClaim.size",
            )
        where = self.claim_fields(volume_class, obj)
        waited = self.waited_fields(obj) if self._waited(obj) else {}
        begun = begin(self.client, obj, "making its claim", {**where, **waited})
        if begun is None:
            return Result.done()
        obj = begun
        if size is None and source is not None and self.volumes.sized_claims():
            probed = self._source_size(obj, volume_class, source)
            if isinstance(probed, Result):
                return probed
            size = probed
        try:
            claim = self.volumes.claim(
                volume_class, obj.metadata.namespace, claim_name(obj), size or 0
            )
        except VolumeError as e:
            transition(self.client, obj, PENDING, e.reason, e.message)
            return Result.requeue(WAIT_SECONDS)
        if source is None:
            assert size is not None
            blanking = self._blank(obj, claim, size)
            if blanking is not None:
                return blanking
            filling = self.filled_elsewhere(obj)
            if filling is not None and filling.failed:
                self.jobs.settle(self.volume_job_id(obj, BLANK), tag(obj), keep=False)
                return self._fail(obj, filling.reason, filling.message)
            if filling is not None:
                transition(self.client, obj, PROVISIONING, filling.reason, filling.message, where)
                return Result.requeue(WAIT_SECONDS)
            return self._ready(obj, claim, {"ok": True, "virtualSize": claim.size()})
        job_id = self.job_id(obj)
        shared = self.volumes.shared_host()
        if source.local_file and not claim.block and shared and not self.imports.started(job_id):
            cloning = self._clone(obj, claim, source, size)
            if cloning is not None:
                return cloning
        try:
            policy = upload_policy(obj)
        except DurationError as e:
            return self._fail(obj, e.reason, e.message)
        outcome = self.imports.step(job_id, claim, source, size, policy)
        if outcome.waiting_for_upload:
            late = timed_out(obj, policy)
            if late is not None:
                self._fail(obj, UPLOAD_TIMED_OUT, late)
                self.imports.settle(job_id, keep=False)
                return Result.requeue(POLL_SECONDS)
            show_upload_wait(self.client, obj, {**where, **(outcome.fields or {})}, outcome)
            return Result.requeue(POLL_SECONDS)
        if outcome.running:
            fields = {**where, **(outcome.fields or {})}
            fields = self.progress.fields(obj.metadata.uid or "", status_of(obj), fields)
            transition(
                self.client, obj, PROVISIONING, PROVISIONING, self._importing(source), fields
            )
            return Result.requeue(POLL_SECONDS)
        return self._ended(obj, claim, outcome, source)

    def _importing(self, source: Source) -> str:
        if source.upload:
            return "importing the upload"
        if source.uid is not None:
            return "copying its source"
        return f"importing {http_url_for_message(source.location)}"

    def _ended(self, obj: Any, claim: Claim, outcome: Outcome, source: Source) -> Result:
        """Ready or Failed as the import ended; again soon while what served its source still
        runs (it was asked to stop), so that it is removed then and not at a resync."""
        job_id = self.job_id(obj)
        if outcome.failed:
            self._fail(obj, outcome.reason or IMPORT_FAILED, outcome.message or "")
            finished = self.imports.finish(job_id, tag(obj), keep=True)
        else:
            result = dict(outcome.result or {})
            if source.uid is not None:
                result["sourceUID"] = source.uid
            self._ready(obj, claim, result)
            finished = self.imports.finish(job_id, tag(obj), keep=False)
        return Result.done() if finished else Result.requeue(POLL_SECONDS)

    def _blank(self, obj: Any, claim: Claim, size: int) -> Result | None:
        """A blank disk: a sparse file of `size` a worker makes and commits whole (a block claim
        is one already); a Result while it is made or once it failed, None when it is made.
        The job that made it is its record until the claim is ready (a file claim once it
        holds its file; a PVC only once sealed, which waits for whatever else fills it), so it
        is settled then, or once the object is Ready, never run again."""
        job_id = self.volume_job_id(obj, BLANK)
        if claim.block or claim.ready:
            self.jobs.settle(job_id, tag(obj), keep=False)
            return None
        outcome = step(self.jobs, job_id, blank_job(claim, size), VolumeResult)
        if isinstance(outcome, Running):
            return Result.requeue(POLL_SECONDS)
        if isinstance(outcome, Failed):
            self._fail(obj, outcome.reason, outcome.message)
            self.jobs.settle(job_id, tag(obj), keep=True)
            return Result.done()
        return None

    def _source_size(self, obj: Any, volume_class: VolumeClass, source: Source) -> int | Result:
        """The size of a claim made with its size (a PVC) when neither the object nor its source
        gives one: the claim's once it is made, else the virtual size a probe worker reads from
        the head of the source (a Result while it reads, or once it could not tell)."""
        made = self.volumes.find(volume_class, obj.metadata.namespace, claim_name(obj))
        if made is not None:
            return made.size()
        if source.upload:
            return self._fail(
                obj,
                SIZE_REQUIRED,
                f"an upload into a claim of the StorageClass {volume_class.name} needs "
                "persistentVolumeClaim.size: its claim is made with its size, before the upload",
            )
        job_id = self.volume_job_id(obj, PROBE)
        outcome = self.jobs.poll(job_id, ProbeResult)
        if outcome is None or (isinstance(outcome, Failed) and outcome.kept):
            fields, files = source_files(source)
            self.jobs.restart(job_id, ProbeJob(source=source.location, **fields), files)
            outcome = Running(None)
        if isinstance(outcome, Running):
            message = "reading the size of its source"
            transition(self.client, obj, PROVISIONING, PROVISIONING, message)
            return Result.requeue(POLL_SECONDS)
        if isinstance(outcome, Failed):
            self.jobs.settle(job_id, tag(obj), keep=True)
            return self._fail(obj, outcome.reason, outcome.message)
        self.jobs.settle(job_id, tag(obj), keep=False)
        return outcome.result.virtual_size

    def _clone(self, obj: Any, claim: Claim, source: Source, size: int | None) -> Result | None:
        """The file claim cloned from the local file of `source` at an instant (reflink), grown
        to `size`: a Result while the worker clones it and once it did, None where the file
        system cannot share extents (or the clone failed), for the import to copy it."""
        job_id = self.volume_job_id(obj, REFLINK)
        outcome = step(self.jobs, job_id, reflink_job(source.location, claim, size), ReflinkResult)
        if isinstance(outcome, Running):
            return Result.requeue(POLL_SECONDS)
        failed = isinstance(outcome, Failed)
        if failed:
            log.info("%s: no instant copy (%s), the import copies it", tag(obj), outcome.message)
        self.jobs.settle(job_id, tag(obj), keep=failed)
        if failed or not outcome.result.cloned:
            return None
        return self._ready(obj, claim, {"ok": True, "sourceUID": source.uid})

    def _ready(self, obj: Any, claim: Claim, result: dict[str, Any]) -> Result:
        self.volumes.seal(claim)
        fields = {
            **self.claim_fields(claim.volume_class, obj),
            **self.ready_fields(obj, claim, result),
        }
        fields["progress"] = "100%"
        transition(self.client, obj, READY, READY, "the claim holds its data", fields)
        return Result.done()

    def _resize(self, obj: Any) -> Result:
        """A Ready object whose spec changed: its claim grown to a larger size, never shrunk."""
        claim = claim_of(self.client, self.volumes, obj)
        if claim is None or not claim.ready:
            transition(self.client, obj, PVC_LOST, PVC_LOST, "the claim is gone")
            return Result.done()
        size = self.size(obj)
        if size is not None and size < claim.size():
            message = (
                f"the disk holds {format_bytes(claim.size())}: it may only grow, "
                f"not to {format_bytes(size)}"
            )
            return self._refuse(obj, SHRINK_REFUSED, message)
        if size is not None and size > claim.size():
            growing = self._grow(obj, claim, size)
            if growing is not None:
                return growing
            claim = claim_of(self.client, self.volumes, obj) or claim
        self.jobs.settle(self.volume_job_id(obj, GROW), tag(obj), keep=False)
        message = "the claim holds its data"
        transition(self.client, obj, READY, READY, message, self.resized_fields(obj, claim))
        return Result.done()

    def _grow(self, obj: Any, claim: Claim, size: int) -> Result | None:
        """Grow the claim to `size`: its storage expanded, then its disk by a worker where the
        disk is a file; a Result until it is, None once it is (and recorded, so that it is not
        grown again)."""
        try:
            expansion = self.volumes.expand(claim, size)
        except ExpansionRefusedError as e:
            return self._refuse(obj, e.reason, e.message)
        except VolumeError as e:
            return Result.failed(ResizeError(f"{e.reason}: {e.message}"))
        growing = f"growing the claim to {format_bytes(size)}"
        if status_of(obj).get("phase") != RESIZING:
            message = growing if expansion.done else expansion.message
            obj = transition(self.client, obj, RESIZING, RESIZING, message)
        if not expansion.done:
            if resizing_for(obj) > EXPANSION_SECONDS:
                late = f"{expansion.message}, for more than {EXPANSION_SECONDS:.0f}s"
                return self._refuse(obj, EXPANSION_TIMED_OUT, late, RESIZING)
            self._say(obj, RESIZING, expansion.message)
            return Result.requeue(WAIT_SECONDS)
        self._say(obj, RESIZING, growing)
        if expansion.grows_disk:
            job_id = self.volume_job_id(obj, GROW)
            outcome = step(self.jobs, job_id, grow_job(claim, size), VolumeResult)
            if isinstance(outcome, Running):
                return Result.requeue(POLL_SECONDS)
            if isinstance(outcome, Failed):
                self.jobs.settle(job_id, tag(obj), keep=True)
                return Result.failed(ResizeError(f"{outcome.reason}: {outcome.message}"))
        self.volumes.resized(claim, size)
        return None

    def _refuse(self, obj: Any, reason: str, message: str, phase: str = READY) -> Result:
        """The claim does not grow as asked, for `reason`: said in the Ready condition (True
        while its disk is Ready as it was) and a Warning Event once; looked at again a while
        later, for a class that came to allow expansion, or a storage done at last."""
        if ready_condition(obj).get("reason") != reason:
            log.warning("%s: %s: %s", tag(obj), reason, message)
            self.client.event(obj, "Warning", reason, message)
        obj = transition(self.client, obj, phase, reason, message)
        self._say(obj, reason, message)
        return Result.requeue(REFUSED_SECONDS)

    def _say(self, obj: Any, reason: str, message: str) -> None:
        """The Ready condition's reason and message made these, its status kept, where what
        the storage says changed them (a transition keeps the message of a reason it keeps)."""
        ready = ready_condition(obj)
        if (ready.get("reason"), ready.get("message")) == (reason, message):
            return
        found = status_of(obj).get("conditions") or []
        holds = ready.get("status") == "True"
        generation = obj.metadata.generation
        conditions = set_condition(obj, found, READY, holds, reason, message, generation)
        self.client.patch_status(obj, {"conditions": conditions})

    def _fail(self, obj: Any, reason: str, message: str) -> Result:
        log.warning("%s failed: %s: %s", tag(obj), reason, message)
        transition(self.client, obj, FAILED, reason, message)
        return Result.done()

    def _settled(self, obj: Any, phase: str) -> Result:
        settled = self.imports.settle(self.job_id(obj), keep=phase == FAILED)
        if phase == READY:
            self.jobs.settle(self.volume_job_id(obj, BLANK), tag(obj), keep=False)
            claim = claim_of(self.client, self.volumes, obj)
            if claim is None or not claim.ready:
                transition(self.client, obj, PVC_LOST, PVC_LOST, "the claim is gone")
            else:
                update_fields(self.client, obj, self.claim_fields(claim.volume_class, obj))
        return Result.done() if settled else Result.requeue(POLL_SECONDS)
