"""BackupStorageLocation: its repository opened now and then (Velero's validation), made at
first use when absent, the phase Available or Unavailable with the reason and an Event; what
an Unavailable one says to do is a change to its manifest.

A location without a password is Unavailable unless `spec.config.encryption: none` asks for an
unencrypted repository; such a location's condition `Encrypted` is False and a Warning Event
says so each time it becomes Available.

An Available location syncs its namespace's Backups from the repository's metadata every
`backupSyncPeriod` (1m; 0 never), as Velero's backup sync: `status.lastSyncedTime` and
`lastSyncedRevision`, and an Event when Backups were made or deleted.

The daemon never opens the repository: a backup worker does (`bsl-<uid>-<generation>`), one
job for the validation and the sync that are due, the metadata listed on the same opening."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from diskferry.backup import Chores, ChoresJob, ChoresResult, MetadataRead
from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.reconcilers.velero.backupsync import listing, sync_backups
from diskferry.control.reconcilers.velero.manifests import READ_FILE, metadata_read
from diskferry.control.reconcilers.velero.repoaccess import Location, location_of
from diskferry.control.resources.backupstoragelocation import (
    BACKUP_STORAGE_LOCATIONS,
    ENCRYPTED,
    BackupStorageLocation,
    BSLPhase,
)
from diskferry.control.resources.duration import parse_duration
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import set_condition
from diskferry.control.runtime.phases import status_of
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs

log = logging.getLogger("diskferry.control")
UNENCRYPTED_MESSAGE = (
    "spec.config.encryption is none: the repository's data and metadata are stored unencrypted"
)
VALIDATION_SECONDS = 60.0
"""How often a location is looked at when its spec does not say (Velero's default, 1m)."""
SYNC_SECONDS = 60.0
"""How often its Backups are synced when its spec does not say (Velero's default, 1m)."""
JOB_POLL_SECONDS = 0.25
"""How often a location looks at the worker that opens its repository."""
PASSWORD_ERROR = "WrongPassword"
"""The reason of a backup worker whose password does not open the repository."""
NOT_FOUND = "RepositoryNotFound"
"""The reason of a backup worker that found no repository (and was not to make one)."""


def frequency(bsl: BackupStorageLocation) -> float:
    """Seconds between validations; 0 validates only when the spec changes."""
    given = bsl.spec.validation_frequency
    return VALIDATION_SECONDS if given is None else parse_duration(given).total_seconds()


def sync_period(bsl: BackupStorageLocation) -> float:
    """Seconds between syncs of the location's Backups; 0 never syncs."""
    given = bsl.spec.backup_sync_period
    return SYNC_SECONDS if given is None else parse_duration(given).total_seconds()


def available(bsl: BackupStorageLocation | None) -> bool:
    """Whether the location was Available when last looked at."""
    return bsl is not None and bsl.status.phase == BSLPhase.AVAILABLE


def _for_manifest(failed: Failed, location: Location) -> str:
    """What the failure of the worker that opened the repository means for the location's
    manifest: the field to set where the engine would name a command line option."""
    if location.password is None and failed.reason == PASSWORD_ERROR:
        return (
            f"the repository at {location.url} is encrypted: set spec.encryptionSecretRef to "
            "the key of a Secret that holds its password"
        )
    if failed.reason == NOT_FOUND:
        return (
            f"there is no repository at {location.url}, and a ReadOnly location makes none: "
            "set spec.accessMode: ReadWrite to have it made"
        )
    return failed.message


class BackupStorageLocationReconciler:
    """Validates each location's repository, creating it when absent, and syncs its Backups;
    a backup worker opens the repository (`bsl-<uid>-<generation>`), one job for what is due."""

    info = BACKUP_STORAGE_LOCATIONS

    def __init__(self, client: Client, runner: Runner, clock: Clock | None = None) -> None:
        self.client = client
        self.jobs = Jobs(runner)
        self.clock = clock or Clock()

    def reconcile(self, obj: BackupStorageLocation) -> Result:
        """Validate the location and sync its Backups when due; look again at the next time
        one of them is due."""
        if obj.metadata.deletion_timestamp is not None:
            return Result.done()
        now = self.clock.now()
        validate = self._validation_due(obj, now)
        validating = validate is not None and validate <= 0
        sync = self._sync_due(obj, now) if available(obj) or validating else None
        syncing = sync is not None and sync <= 0
        if validating or syncing:
            looked = self._look(obj, now, validating, syncing)
            if looked is None:
                return Result.requeue(JOB_POLL_SECONDS)
            obj, synced = looked
            if validating:
                validate = frequency(obj) or None
            sync = sync_period(obj) if synced else None
            if not synced and available(obj):
                sync = self._sync_due(obj, now)
        waits = [w for w in (validate, sync) if w]
        return Result.requeue(min(waits)) if waits else Result.done()

    def job_id(self, obj: BackupStorageLocation, generation: int | None = None) -> str:
        """The id of the job that opens the location's repository for its spec's generation
        (or `generation`)."""
        return f"bsl-{obj.metadata.uid}-{generation or obj.metadata.generation}"

    @staticmethod
    def _validation_due(obj: BackupStorageLocation, now: datetime) -> float | None:
        """Seconds to the next validation (0 or less: now), None when none is due."""
        last = obj.status.last_validation_time
        if status_of(obj).get("observedGeneration") != obj.metadata.generation or last is None:
            return 0.0
        every = frequency(obj)
        return every - (now - last).total_seconds() if every else None

    @staticmethod
    def _sync_due(obj: BackupStorageLocation, now: datetime) -> float | None:
        """Seconds to the next sync (0 or less: now), None when the location never syncs."""
        every = sync_period(obj)
        if not every:
            return None
        last = obj.status.last_synced_time
        return 0.0 if last is None else every - (now - last).total_seconds()

    def _look(
        self, obj: BackupStorageLocation, now: datetime, validating: bool, syncing: bool
    ) -> tuple[BackupStorageLocation, bool] | None:
        """Open the repository in a worker (made when absent if validating a ReadWrite
        location; its metadata listed if syncing) and, once it ended, say what it found: the
        location, and whether a sync was made or failed; None while the worker runs."""
        try:
            location = location_of(self.client, obj)
        except DiskferryError as e:
            return self._not_opened(obj, now, validating, e.reason, e.message), not validating
        chores = Chores(listing=listing(self.client, obj) if syncing else None)
        create = validating and obj.spec.access_mode == "ReadWrite"
        job, files = location.job(ChoresJob, create=create, chores=chores, output=READ_FILE)
        self._retire(obj)
        job_id = self.job_id(obj)
        done = self.jobs.chore(job_id, job, files, ChoresResult, tag(obj), (READ_FILE,))
        if done is None:
            return None
        if isinstance(done, Failed):
            why = _for_manifest(done, location)
            return self._not_opened(obj, now, validating, done.reason, why), not validating
        if validating:
            obj = self._available(obj, now, done.result, location)
        read = metadata_read(done)
        if not available(obj) or read.names is None:
            return obj, False
        return self._sync(obj, now, read), True

    def _not_opened(
        self, obj: BackupStorageLocation, now: datetime, validating: bool, reason: str, why: str
    ) -> BackupStorageLocation:
        """The location Unavailable when validating, else a Warning Event that its Backups
        were not synced."""
        message = f"the repository cannot be opened: {why}"
        if validating:
            return self._validated(obj, now, BSLPhase.UNAVAILABLE, reason, {"message": message})
        self.client.event(obj, "Warning", "SyncFailed", f"the Backups were not synced: {why}")
        return obj

    def _retire(self, obj: BackupStorageLocation) -> None:
        """Stop the jobs of the spec's earlier generations since the last one validated (its
        spec changed while they ran)."""
        first = status_of(obj).get("observedGeneration") or 1
        for generation in range(first, obj.metadata.generation or 1):
            self.jobs.stop(self.job_id(obj, generation))

    def _sync(
        self, obj: BackupStorageLocation, now: datetime, read: MetadataRead
    ) -> BackupStorageLocation:
        """Make the Backups the repository holds and this host lacks, delete the synced ones
        it holds no more."""
        synced = sync_backups(self.client, obj, read)
        fields = {"lastSyncedTime": rfc3339(now), "lastSyncedRevision": synced.revision}
        obj = self.client.patch_status(obj, fields)
        if synced.made or synced.deleted:
            made = ", ".join(synced.made) or "none"
            deleted = ", ".join(synced.deleted) or "none"
            message = (
                f"Backups synced from the repository: made {made}; deleted, their metadata "
                f"gone: {deleted}"
            )
            self.client.event(obj, "Normal", "BackupsSynced", message)
        return obj

    def _available(
        self, obj: BackupStorageLocation, now: datetime, opened: ChoresResult, location: Location
    ) -> BackupStorageLocation:
        """The location Available: its repository opened (or made now) at `location`."""
        reason = "RepositoryCreated" if opened.created else "Available"
        said = "created the repository" if opened.created else "the repository opens"
        message = f"{said} {opened.repository} at {location.url}"
        fields = {
            "message": message,
            "repositoryID": opened.repository,
            "conditions": self._encrypted(obj, location.password is not None),
        }
        unencrypted = location.password is None
        return self._validated(obj, now, BSLPhase.AVAILABLE, reason, fields, unencrypted)

    def _validated(
        self,
        obj: BackupStorageLocation,
        now: datetime,
        phase: BSLPhase,
        reason: str,
        fields: dict[str, Any],
        unencrypted: bool = False,
    ) -> BackupStorageLocation:
        """The location's validation written (`fields`, the phase, its time and generation),
        and an Event when its phase changed or its repository was made (a Warning too when
        it is `unencrypted`)."""
        if obj.status.phase != phase or reason == "RepositoryCreated":
            warning = phase == BSLPhase.UNAVAILABLE
            self.client.event(obj, "Warning" if warning else "Normal", reason, fields["message"])
            if warning:
                log.warning("%s is Unavailable: %s", tag(obj), fields["message"])
            elif unencrypted:
                self.client.event(obj, "Warning", "Unencrypted", UNENCRYPTED_MESSAGE)
        return self.client.patch_status(
            obj,
            {
                **fields,
                "phase": phase.value,
                "lastValidationTime": rfc3339(now),
                "observedGeneration": obj.metadata.generation,
            },
        )

    @staticmethod
    def _encrypted(obj: BackupStorageLocation, encrypted: bool) -> list[dict[str, Any]]:
        """The conditions with `Encrypted` saying whether the repository is."""
        conditions = [c.to_json() for c in obj.status.conditions]
        if encrypted:
            said = "the repository is encrypted"
            return set_condition(obj, conditions, ENCRYPTED, True, "PasswordSet", said)
        return set_condition(
            obj, conditions, ENCRYPTED, False, "EncryptionDisabled", UNENCRYPTED_MESSAGE
        )
