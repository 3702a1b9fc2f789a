"""Schedule: at each time its expression names (UTC, on the store's clock) a Backup
`<schedule>-<YYYYMMDDhhmmss>` made from the template, labelled `diskferry.io/schedule-name`
(and with the template's `metadata.labels`, or else the Schedule's labels). The expression is
Velero's: 5-field cron, a descriptor (@hourly, @daily, ...), or `@every <duration>`, each
time that duration after the last run (or the creation).

Times that passed while the daemon was down get one catch-up run, not one each, and are
reported (`status.missedRuns`, the MissedRuns condition and an Event). A paused Schedule
makes no Backup; the times it passes are recorded as `lastSkipped`. `skipImmediately` skips
what is due when the Schedule is created or unpaused (lastSkipped is then), and is set back
to false. A bad expression is FailedValidation. After the newest of its Backups ended, the
keep policy picks the snapshots of its Backups that go: they are forgotten, the Backups all
of whose snapshots went are deleted, and the repository is pruned, all in one backup worker
(`sch-<uid>-<the newest Backup's uid>`); `status.retention` and Events say what went and what
was freed."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from croniter import CroniterError, croniter

from diskferry.backup import Chores, ChoresJob, ChoresResult
from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.reconcilers.velero.backup import ENDED_PHASES
from diskferry.control.reconcilers.velero.backupstoragelocation import available
from diskferry.control.reconcilers.velero.forgetting import backup_snapshots, freed_text, let_go
from diskferry.control.reconcilers.velero.manifests import metadata_name
from diskferry.control.reconcilers.velero.repoaccess import location_of
from diskferry.control.resources.backup import Backup, BackupPhase
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.duration import DurationError, parse_duration
from diskferry.control.resources.model import API_VERSION, ObjectMeta, OwnerReference
from diskferry.control.resources.schedule import (
    MISSED_RUNS,
    SCHEDULE_NAME,
    SCHEDULED,
    SCHEDULES,
    Retention,
    Schedule,
    SchedulePhase,
)
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import set_condition
from diskferry.control.runtime.finalizer import deleting
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs

POLL_SECONDS = 2.0
"""How often a Schedule looks at a Backup of its own that has not ended."""
MAX_WAIT_SECONDS = 300.0
LATE_SECONDS = 60.0
"""A time whose run comes later than this was missed."""
MAX_COUNTED = 100_000
RETRY_SECONDS = 5.0
JOB_POLL_SECONDS = 0.25
"""How often a Schedule looks at the worker applying its keep policy."""
KEPT_PHASES = (BackupPhase.COMPLETED, BackupPhase.PARTIALLY_FAILED)


EVERY = re.compile(r"^@every\s+(.*)$")
CRON_FIELDS = 5


def _every(expression: str) -> timedelta | None:
    """The period of an `@every <duration>` expression (at least a second, whole seconds, as
    Velero's cron takes it); None for any other expression."""
    found = EVERY.match(expression.strip())
    if found is None:
        return None
    seconds = int(parse_duration(found.group(1)).total_seconds())
    return timedelta(seconds=max(seconds, 1))


def cron_error(expression: str) -> str | None:
    """Why `expression` is not a schedule Velero takes, None when it is one."""
    try:
        if _every(expression) is not None:
            return None
    except DurationError as e:
        return f"spec.schedule: invalid @every duration in {expression!r}: {e.message}"
    fields = expression.split()
    if not expression.startswith("@") and len(fields) != CRON_FIELDS:
        return (
            f"spec.schedule: invalid cron expression {expression!r}: expected exactly 5 fields, "
            f"found {len(fields)}"
        )
    try:
        croniter(expression)
    except (CroniterError, ValueError) as e:
        return f"spec.schedule: invalid cron expression {expression!r}: {e}"
    return None


def next_time(expression: str, after: datetime) -> datetime:
    """The first time `expression` names after `after`."""
    every = _every(expression)
    if every is not None:
        return after.replace(microsecond=0) + every
    return croniter(expression, after).get_next(datetime)


def due_times(expression: str, after: datetime, now: datetime) -> list[datetime]:
    """The times `expression` names after `after`, up to `now` (at most MAX_COUNTED)."""
    due: list[datetime] = []
    moment = after
    while len(due) < MAX_COUNTED:
        moment = next_time(expression, moment)
        if moment > now:
            break
        due.append(moment)
    return due


def backup_name(schedule: str, moment: datetime) -> str:
    """Velero's name of a scheduled Backup: `<schedule>-<YYYYMMDDhhmmss>`."""
    return f"{schedule}-{moment:%Y%m%d%H%M%S}"


class ScheduleReconciler:
    """Makes each Schedule's Backups at their times, and lets the old ones go."""

    info = SCHEDULES

    def __init__(self, client: Client, runner: Runner, clock: Clock | None = None) -> None:
        self.client = client
        self.jobs = Jobs(runner)
        self.clock = clock or Clock()

    def reconcile(self, obj: Schedule) -> Result:
        """One step: validate, run when due, apply the keep policy; look again when next due."""
        if deleting(obj):
            return Result.done()
        error = cron_error(obj.spec.schedule)
        if error is not None:
            return self._invalid(obj, error)
        now = self.clock.now()
        if obj.spec.skip_immediately and not obj.spec.paused:
            obj = self._skip_immediately(obj, now)
        made = self._made(obj)
        obj, made = self._run(obj, now, made)
        wait = ((obj.status.next_run or now) - now).total_seconds()
        waits = [max(wait, 0.0), MAX_WAIT_SECONDS]
        if any(b.status.phase not in ENDED_PHASES for b in made):
            waits.append(POLL_SECONDS)
        retry = self._retain(obj, made)
        if retry is not None:
            waits.append(retry)
        return Result.requeue(min(waits))

    def _made(self, obj: Schedule) -> list[Backup]:
        """The Backups this Schedule made, oldest first."""
        found = self.client.list(
            Backup, obj.metadata.namespace, labels={SCHEDULE_NAME: obj.metadata.name or ""}
        )
        return sorted(found, key=lambda b: (b.metadata.creation_timestamp, b.metadata.name))

    def _invalid(self, obj: Schedule, error: str) -> Result:
        if obj.status.phase == SchedulePhase.FAILED_VALIDATION and obj.status.validation_errors == [
            error
        ]:
            return Result.done()
        conditions = set_condition(
            obj,
            [c.to_json() for c in obj.status.conditions],
            SCHEDULED,
            False,
            "FailedValidation",
            error,
            obj.metadata.generation,
        )
        obj = self.client.patch_status(
            obj,
            {
                "phase": SchedulePhase.FAILED_VALIDATION.value,
                "validationErrors": [error],
                "nextRun": None,
                "conditions": conditions,
                "observedGeneration": obj.metadata.generation,
            },
        )
        self.client.event(obj, "Warning", "FailedValidation", error)
        return Result.done()

    def _skip_immediately(self, obj: Schedule, now: datetime) -> Schedule:
        """Skip what is due now (lastSkipped is now), and set skipImmediately back to false."""
        obj = self.client.patch_status(obj, {"lastSkipped": rfc3339(now)})
        spec = obj.spec.model_copy(update={"skip_immediately": False})
        obj = self.client.update(obj.model_copy(update={"spec": spec}))
        self.client.event(
            obj,
            "Normal",
            "SkippedImmediately",
            f"skipImmediately: what is due at {rfc3339(now)} is skipped; the flag is false again",
        )
        return obj

    def _handled_through(self, obj: Schedule) -> datetime:
        """The last moment whose due times were run or skipped (the creation at first)."""
        marks = [m for m in (obj.status.last_backup, obj.status.last_skipped) if m]
        if marks:
            return max(marks)
        created = obj.metadata.creation_timestamp
        return created if created is not None else self.clock.now()

    def _run(
        self, obj: Schedule, now: datetime, made: list[Backup]
    ) -> tuple[Schedule, list[Backup]]:
        """Make the Backup when a time is due (skip it when paused); the status brought up."""
        expression = obj.spec.schedule
        since = self._handled_through(obj)
        due = due_times(expression, since, now)
        conditions = [c.to_json() for c in obj.status.conditions]
        status: dict[str, Any] = {
            "phase": SchedulePhase.ENABLED.value,
            "validationErrors": [],
            "observedGeneration": obj.metadata.generation,
        }
        mark = since
        if due and obj.spec.paused:
            status["lastSkipped"] = rfc3339(now)
            mark = now
            self.client.event(
                obj, "Normal", "Skipped", f"paused: the run due at {rfc3339(due[-1])} is skipped"
            )
        elif due:
            backup, created = self._backup(obj, now, due[0], made)
            if created:
                made = [*made, backup]
            mark = backup.metadata.creation_timestamp or now
            status["lastBackup"] = rfc3339(mark)
            late = [t for t in due if (now - t).total_seconds() > LATE_SECONDS]
            if late:
                message = (
                    f"{len(late)} scheduled runs missed since {rfc3339(late[0])}:"
                    f" one catch-up run made, the Backup {backup.metadata.name}"
                )
                status["missedRuns"] = {
                    "count": len(late),
                    "since": rfc3339(late[0]),
                    "caughtUp": rfc3339(mark),
                }
                conditions = set_condition(obj, conditions, MISSED_RUNS, True, "CaughtUp", message)
                if created:
                    self.client.event(obj, "Warning", MISSED_RUNS, message)
            elif any(c["type"] == MISSED_RUNS for c in conditions):
                on_time = f"{rfc3339(due[-1])} run on time"
                conditions = set_condition(obj, conditions, MISSED_RUNS, False, "OnTime", on_time)
            if created:
                self.client.event(
                    obj, "Normal", "BackupCreated", f"made the Backup {backup.metadata.name}"
                )
        upcoming = rfc3339(next_time(expression, mark))
        status["nextRun"] = upcoming
        if obj.spec.paused:
            paused = "spec.paused is set"
            conditions = set_condition(obj, conditions, SCHEDULED, False, "Paused", paused)
        else:
            enabled = f"next {upcoming}"
            conditions = set_condition(obj, conditions, SCHEDULED, True, "Enabled", enabled)
        status["conditions"] = conditions
        current = obj.status.to_json()
        if any(current.get(key) != value for key, value in status.items()):
            obj = self.client.patch_status(obj, status)
        return obj, made

    def _backup(
        self, obj: Schedule, now: datetime, first_due: datetime, made: list[Backup]
    ) -> tuple[Backup, bool]:
        """The Backup of the due times: one made already (a status not written), or a new one."""
        for backup in reversed(made):
            created = backup.metadata.creation_timestamp
            if created is not None and created >= first_due:
                return backup, False
        name = obj.metadata.name or ""
        owners = []
        if obj.spec.use_owner_references_in_backup:
            owners.append(
                OwnerReference(
                    apiVersion=API_VERSION,
                    kind=SCHEDULES.kind,
                    name=name,
                    uid=obj.metadata.uid or "",
                    controller=True,
                )
            )
        meta = ObjectMeta(
            name=backup_name(name, now),
            namespace=obj.metadata.namespace,
            labels={**self._labels(obj), SCHEDULE_NAME: name},
            ownerReferences=owners,
        )
        body = {
            "apiVersion": API_VERSION,
            "kind": "Backup",
            "metadata": meta.to_json(),
            "spec": obj.spec.template.to_json(),
        }
        return self.client.create(Backup.model_validate(body)), True

    @staticmethod
    def _labels(obj: Schedule) -> dict[str, str]:
        """The labels of the Backups it makes: the template's metadata.labels when given, as
        Velero takes them, else the Schedule's own."""
        metadata = obj.spec.template.metadata
        if metadata is not None and metadata.labels is not None:
            return metadata.labels
        return obj.metadata.labels

    def _retain(self, obj: Schedule, made: list[Backup]) -> float | None:
        """Apply the keep policy once the newest Backup ended; seconds to a look again, if
        one is due."""
        keep = obj.spec.keep
        kept = [b for b in made if b.status.phase in KEPT_PHASES and not deleting(b)]
        if keep is None or not keep.has_policy or not kept:
            return None
        newest = kept[-1]
        retention = obj.status.retention
        if retention is not None and retention.judged == newest.metadata.name and retention.pruned:
            return None
        namespace = obj.metadata.namespace or "default"
        bsl = self.client.get(BackupStorageLocation, namespace, newest.spec.storage_location or "")
        if bsl is None or not available(bsl):
            return RETRY_SECONDS
        snapshots = {b.metadata.name or "": backup_snapshots(b) for b in kept}
        described = {metadata_name(namespace, name): ids for name, ids in snapshots.items() if ids}
        forgetting = let_go({i for ids in snapshots.values() for i in ids}, described, keep)
        chores = Chores(forget=forgetting, prune="ifForgotten")
        try:
            job, files = location_of(self.client, bsl).job(ChoresJob, chores=chores, wait=True)
        except DiskferryError as e:
            self.client.event(obj, "Warning", "RetentionFailed", e.message)
            return MAX_WAIT_SECONDS
        job_id = f"sch-{obj.metadata.uid}-{newest.metadata.uid}"
        done = self.jobs.chore(job_id, job, files, ChoresResult, tag(obj))
        if done is None:
            return JOB_POLL_SECONDS
        if isinstance(done, Failed):
            message = f"the keep policy was not applied: {done.message}"
            self.client.event(obj, "Warning", "RetentionFailed", message)
            return MAX_WAIT_SECONDS
        self._retained(obj, newest.metadata.name or "", snapshots, done.result)
        return None

    def _retained(
        self, obj: Schedule, judged: str, snapshots: dict[str, list[str]], done: ChoresResult
    ) -> None:
        """Delete the Backups whose snapshots all went, and say what went and was freed."""
        namespace = obj.metadata.namespace or "default"
        gone = set(done.forgotten)
        doomed = [name for name, ids in snapshots.items() if ids and set(ids) <= gone]
        for name in doomed:
            self.client.delete(Backup, namespace, name)
        retention = Retention(
            judged=judged,
            forgottenSnapshots=sorted(gone),
            deletedBackups=doomed,
            pruned=True,
            bytesFreed=0 if done.pruned is None else done.pruned.bytes_freed,
        )
        self.client.patch_status(obj, {"retention": retention.to_json()})
        if gone:
            self.client.event(
                obj,
                "Normal",
                "Forgotten",
                f"the keep policy let {len(gone)} snapshots go;"
                f" Backups deleted: {', '.join(doomed) or 'none'}",
            )
        if done.pruned is not None:
            self.client.event(obj, "Normal", "Pruned", freed_text(done.pruned))
