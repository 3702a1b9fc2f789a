"""The life every DataUpload and DataDownload shares: New -> Accepted -> Prepared ->
InProgress -> Completed | Failed, and Canceling -> Canceled from any phase on `spec.cancel`.

Accepted needs the storage location Available (and what the kind adds: one upload per VM);
Prepared is the kind's own preparation; the scheduler admits InProgress under the cap; the
worker's /progress is copied into `status.progress`; every worker gets the DataMoverConfig's
`bandwidthLimit` (bytes a second) as its job's. `operationTimeout` runs from Accepted:
a worker still running at its expiry is stopped and the resource Failed; a worker that
ended (while the daemon was down, or in the last moment) is judged by its result. A
worker's last lines go to the daemon's log tagged with the kind's words ("data mover log",
"downloader log"), the resource and its VM; a failed worker's scratch stays until the
resource is deleted, at most FAILED_KEPT of each kind; a succeeded or cancelled one's goes.
Every phase change is an Event. What a failed or cancelled mover made is removed before its
final phase is written, so a daemon killed between the two finishes the removal.

Each mover carries the finalizer `diskferry.io/data-mover`: deleting one stops its worker
(which removes what it made, a backup's fleecing nodes and files, a restore's prime copy),
removes the worker's files and what the kind made (a DataDownload's disk, once it is gone),
and only then lets the object go.
"""

from __future__ import annotations

import logging
import socket
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.host.volumes import Volumes
from diskferry.control.reconcilers.datamover.admission import EPOCH, Scheduler
from diskferry.control.reconcilers.datamover.moverconfig import load_config
from diskferry.control.reconcilers.velero.backupstoragelocation import available
from diskferry.control.reconcilers.velero.repoaccess import Location, location_of
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.datamover import ENDED, MoverPhase
from diskferry.control.resources.datamoverconfig import DataMoverConfigSpec
from diskferry.control.resources.duration import format_duration, parse_duration
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import Reason
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting, held, release
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.control.runtime.runner.jobs import WORKER_LOST, Failed, Jobs, Running
from diskferry.worker.job import validation_message

if TYPE_CHECKING:
    from diskferry.backup import DiskTransfer

log = logging.getLogger("diskferry.control")
POLL_SECONDS = 1.0
STOP_POLL = 0.3
WAIT_SECONDS = 2.0
FAILED_KEPT = 10
"""Failed workers' scratch kept for debugging, per kind; older ones are removed."""
FINALIZER = "diskferry.io/data-mover"
INVALID_JOB = Reason("InvalidJob")
LOCATION_LOST = Reason("StorageLocationLost")
OPERATION_TIMEOUT = Reason("OperationTimeout")
"""The reason of a mover whose job, built from its object, is not one its worker takes."""


class MoverFailure(DiskferryError):
    """The mover cannot go on: its reason and message go into status."""

    reason = "DataMoverFailed"


@dataclass(frozen=True)
class Waiting:
    """Not yet: the message says what the mover waits for, and `seconds` when to look again."""

    message: str
    seconds: float = WAIT_SECONDS


@dataclass(frozen=True)
class Job:
    """The worker job the mover runs, its files, and the message of its Prepared phase."""

    job: DiskTransfer
    files: list[JobFile] = field(default_factory=list)
    message: str = ""


class MoverReconciler(ABC):
    """Reconciles one data mover kind; the kind gives what differs."""

    info: KindInfo
    result_model: type[BaseModel]
    prefix = ""
    log_words = ""
    running = ""

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        scheduler: Scheduler,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.jobs = Jobs(runner)
        self.volumes = volumes
        self.scheduler = scheduler
        self.clock = clock or Clock()
        self.node = socket.gethostname()

    @abstractmethod
    def blocker(self, obj: Any, config: DataMoverConfigSpec) -> str | None:
        """What the mover waits for before it may be accepted, None when nothing."""

    @abstractmethod
    def prepare(self, obj: Any, location: Location, config: DataMoverConfigSpec) -> Job | Waiting:
        """The job to run once admitted, or what the mover still waits for (MoverFailure
        when it never can)."""

    @abstractmethod
    def completed(self, obj: Any, result: Any) -> dict[str, Any]:
        """The status fields of a succeeded job, from its `result` (a `result_model`);
        MoverFailure when it must not count."""

    @abstractmethod
    def who(self, obj: Any) -> str:
        """How the log names what the mover moves (its VM, its disk)."""

    def failure_fields(self, obj: Any, reason: str, message: str) -> dict[str, Any]:
        """The status fields of a mover that failed for `reason`, beside its phase."""
        return {}

    def cleanup(self, obj: Any, succeeded: bool) -> bool:
        """Remove what the mover made besides its job once the job ended (`succeeded`: its job
        did, and the mover is about to complete); whether it is all gone."""
        return True

    def job_id(self, obj: Any) -> str:
        """The id of the mover's worker job."""
        return f"{self.prefix}-{obj.metadata.uid}"

    def reconcile(self, obj: Any) -> Result:
        """One step of the mover's life."""
        if deleting(obj):
            if not all([self.jobs.stop(job_id) for job_id in self.job_ids(obj)]):
                return Result.requeue(STOP_POLL)
            if obj.status.phase not in ENDED and not self.cleanup(obj, succeeded=False):
                return Result.requeue(STOP_POLL)
            release(self.client, obj, FINALIZER)
            return Result.done()
        obj = held(self.client, obj, FINALIZER)
        phase = obj.status.phase
        config = load_config(self.client)
        if phase in ENDED:
            # a daemon killed after the final status may not have settled the job
            kept = phase == MoverPhase.FAILED
            self.jobs.settle(self.job_id(obj), self._log_tag(obj), kept, config.worker_log_lines)
            return Result.done()
        if obj.spec.cancel:
            return self._cancel(obj, config)
        if phase is None:
            obj = self._move(obj, MoverPhase.NEW, "New", "waiting to be accepted")
            phase = MoverPhase.NEW
        try:
            if phase != MoverPhase.NEW and self._timed_out(obj, config):
                polled = self.jobs.poll(self.job_id(obj), self.result_model)
                if polled is None or isinstance(polled, Running):
                    return self._time_out(obj, polled is not None, config)
                # a job that ended is judged by its result, whatever the clock says
            if phase == MoverPhase.NEW:
                return self._accept(obj, config)
            if phase in (MoverPhase.ACCEPTED, MoverPhase.PREPARED):
                return self._prepare(obj, config)
            if phase == MoverPhase.IN_PROGRESS:
                return self._poll(obj, config)
        except MoverFailure as e:
            return self._fail(obj, e.reason, e.message, config)
        return Result.requeue(POLL_SECONDS)

    def _location(self, obj: Any) -> BackupStorageLocation | None:
        name = obj.spec.backup_storage_location
        return self.client.get(BackupStorageLocation, obj.metadata.namespace, name)

    def _accept(self, obj: Any, config: DataMoverConfigSpec) -> Result:
        bsl = self._location(obj)
        name = obj.spec.backup_storage_location
        if not available(bsl):
            said = "does not exist" if bsl is None else f"is {bsl.status.phase or 'not validated'}"
            why = f": {bsl.status.message}" if bsl is not None and bsl.status.message else ""
            message = f"waiting for the BackupStorageLocation {name} to be Available: it {said}"
            self._note(obj, message + why)
            return Result.requeue(WAIT_SECONDS)
        blocked = self.blocker(obj, config)
        if blocked:
            self._note(obj, blocked)
            return Result.requeue(WAIT_SECONDS)
        now = rfc3339(self.clock.now())
        fields = {"acceptedTimestamp": now, "acceptedByNode": self.node, "node": self.node}
        self._move(obj, MoverPhase.ACCEPTED, "Accepted", f"accepted by {self.node}", fields)
        return Result.requeue(0)

    def _prepare(self, obj: Any, config: DataMoverConfigSpec) -> Result:
        bsl = self._location(obj)
        if bsl is None:
            raise MoverFailure(
                f"the BackupStorageLocation {obj.spec.backup_storage_location} is gone",
                reason=LOCATION_LOST,
            )
        try:
            location = location_of(self.client, bsl)
        except DiskferryError as e:
            raise MoverFailure(e.message, reason=e.reason) from e
        try:
            prepared = self.prepare(obj, location, config)
        except ValidationError as e:
            message = f"its worker's job is not valid: {validation_message(e)}"
            raise MoverFailure(message, reason=INVALID_JOB) from None
        if isinstance(prepared, Waiting):
            self._note(obj, prepared.message)
            return Result.requeue(prepared.seconds)
        if obj.status.phase != MoverPhase.PREPARED:
            obj = self._move(obj, MoverPhase.PREPARED, "Prepared", prepared.message)

        def start() -> None:
            # the job first: a daemon killed in between finds it Prepared, and the start of
            # a job already started starts nothing
            self.jobs.start(self.job_id(obj), prepared.job, prepared.files)
            fields = {"startTimestamp": rfc3339(self.clock.now())}
            self._move(obj, MoverPhase.IN_PROGRESS, "InProgress", self.running, fields)

        waits = self.scheduler.admit(
            self.client, self.info.model, obj, config.max_concurrent_data_movers, start
        )
        if waits:
            self._note(obj, waits)
        return Result.requeue(POLL_SECONDS)

    def _poll(self, obj: Any, config: DataMoverConfigSpec) -> Result:
        job_id = self.job_id(obj)
        polled = self.jobs.poll(job_id, self.result_model)
        if polled is None:
            raise MoverFailure("the worker's job is gone", reason=WORKER_LOST)
        if isinstance(polled, Running):
            self._progress(obj, polled.progress or {})
            return Result.requeue(POLL_SECONDS)
        if isinstance(polled, Failed):
            reason, message = polled.reason, polled.message
            # stopped at its deadline: by its own SIGTERM handler, or before it had one
            if (polled.cancelled or polled.lost) and self._timed_out(obj, config):
                reason, message = self._timeout_failure(obj, config)
            return self._fail(obj, reason, message, config)
        if not self.cleanup(obj, succeeded=True):
            return Result.requeue(STOP_POLL)
        fields = self.completed(obj, polled.result)
        fields["completionTimestamp"] = rfc3339(self.clock.now())
        self._move(obj, MoverPhase.COMPLETED, "Completed", fields.pop("message", "done"), fields)
        self.jobs.settle(job_id, self._log_tag(obj), False, config.worker_log_lines)
        return Result.done()

    def _progress(self, obj: Any, progress: dict[str, Any]) -> None:
        wanted = {
            "totalBytes": int(progress.get("bytesTotal") or 0),
            "bytesDone": int(progress.get("bytesDone") or 0),
        }
        if obj.status.progress.to_json() != wanted:
            self.client.patch_status(obj, {"progress": wanted})

    def _timed_out(self, obj: Any, config: DataMoverConfigSpec) -> bool:
        accepted = obj.status.accepted_timestamp
        if accepted is None:
            return False
        elapsed = (self.clock.now() - accepted).total_seconds()
        return elapsed >= self._timeout(obj, config)

    def _timeout(self, obj: Any, config: DataMoverConfigSpec) -> float:
        given = obj.spec.operation_timeout or config.operation_timeout
        return parse_duration(given).total_seconds()

    def _time_out(self, obj: Any, started: bool, config: DataMoverConfigSpec) -> Result:
        """Stop a job still running at its deadline (judged once it has ended), or fail a
        mover that started none."""
        if started:
            self.jobs.cancel(self.job_id(obj))
            return Result.requeue(STOP_POLL)
        return self._fail(obj, *self._timeout_failure(obj, config), config)

    def _timeout_failure(self, obj: Any, config: DataMoverConfigSpec) -> tuple[str, str]:
        timeout = format_duration(timedelta(seconds=round(self._timeout(obj, config))))
        tail = self.runner.log_tail(self.job_id(obj), 1)
        last = f"; the worker's last line: {tail[-1]}" if tail else ""
        return (
            OPERATION_TIMEOUT,
            f"the operation did not end within {timeout} of being accepted{last}",
        )

    def _cancel(self, obj: Any, config: DataMoverConfigSpec) -> Result:
        if obj.status.phase != MoverPhase.CANCELING:
            obj = self._move(obj, MoverPhase.CANCELING, "Canceling", "canceling as asked")
        job_id = self.job_id(obj)
        self.jobs.cancel(job_id)
        if not self.jobs.settle(job_id, self._log_tag(obj), False, config.worker_log_lines):
            return Result.requeue(STOP_POLL)
        if not self.cleanup(obj, succeeded=False):
            return Result.requeue(STOP_POLL)
        fields = {"completionTimestamp": rfc3339(self.clock.now())}
        self._move(obj, MoverPhase.CANCELED, "Canceled", "canceled as asked", fields)
        return Result.done()

    def _fail(self, obj: Any, reason: str, message: str, config: DataMoverConfigSpec) -> Result:
        """Stop the worker, remove what the mover made, settle the job (its scratch kept), and
        only then say Failed: a daemon killed on the way finds the mover not ended and fails
        it again."""
        job_id = self.job_id(obj)
        if isinstance(self.jobs.poll(job_id, self.result_model), Running):
            self.jobs.cancel(job_id)
            return Result.requeue(STOP_POLL)
        if not self.cleanup(obj, succeeded=False):
            return Result.requeue(STOP_POLL)
        log.warning("%s of %s failed: %s: %s", tag(obj), self.who(obj), reason, message)
        fields = {
            **self.failure_fields(obj, reason, message),
            "completionTimestamp": rfc3339(self.clock.now()),
        }
        self.jobs.settle(job_id, self._log_tag(obj), True, config.worker_log_lines)
        self._move(obj, MoverPhase.FAILED, reason, message, fields)
        self._bound_failed()
        return Result.done()

    def _bound_failed(self) -> None:
        """Remove the scratch of the failed movers of this kind beyond the FAILED_KEPT newest."""
        failed = [o for o in self.client.list(self.info.model) if o.status.phase == "Failed"]
        failed.sort(key=lambda o: o.status.completion_timestamp or EPOCH, reverse=True)
        for old in failed[FAILED_KEPT:]:
            self.runner.purge(self.job_id(old), keep_scratch=False)

    def _log_tag(self, obj: Any) -> str:
        """How the daemon's log tags the lines of the mover's worker."""
        return f"{self.log_words} {tag(obj)} ({self.who(obj)})"

    def job_ids(self, obj: Any) -> list[str]:
        """The ids of every job the mover may have started: its worker's, and those the kind
        adds."""
        return [self.job_id(obj)]

    def _note(self, obj: Any, message: str) -> None:
        """Say in status what the mover waits for (written only when it changes)."""
        if obj.status.message != message:
            self.client.patch_status(obj, {"message": message})

    def _move(
        self,
        obj: Any,
        phase: MoverPhase,
        reason: str,
        message: str,
        fields: dict[str, Any] | None = None,
    ) -> Any:
        """Set the phase, message and fields; an Event (a Warning for Failed)."""
        status = {
            **(fields or {}),
            "phase": phase.value,
            "message": message,
            "observedGeneration": obj.metadata.generation,
        }
        if obj.status.phase != phase:
            kind = "Warning" if phase == MoverPhase.FAILED else "Normal"
            self.client.event(obj, kind, reason, message)
        return self.client.patch_status(obj, status)
