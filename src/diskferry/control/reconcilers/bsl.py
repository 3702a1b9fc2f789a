"""BackupStorageLocation: its repository opened now and then (Velero's validation), made at
first use when absent, the phase Available or Unavailable with the reason and an Event; what
an Unavailable one says to do is a change to its manifest.

A location without a password is Unavailable unless `spec.config.encryption: none` asks for an
unencrypted repository; such a location's condition `Encrypted` is False and a Warning Event
says so each time it becomes Available.

An Available location syncs its namespace's Backups from the repository's metadata every
`backupSyncPeriod` (1m; 0 never), as Velero's backup sync: `status.lastSyncedTime` and
`lastSyncedRevision`, and an Event when Backups were made or deleted."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from diskferry.backup.errors import PasswordError, RepositoryNotFoundError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.duration import parse_duration
from diskferry.control.reconcilers.backupsync import sync_backups
from diskferry.control.reconcilers.claimed import tag
from diskferry.control.reconcilers.location import Location, location_of, open_or_create
from diskferry.control.reconcilers.phases import status_of
from diskferry.control.resources.backupstoragelocation import (
    BACKUP_STORAGE_LOCATIONS,
    BackupStorageLocation,
    BSLPhase,
)
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import set_condition
from diskferry.control.runtime.reconciler import Result
from diskferry.disk.errors import DiskferryError

log = logging.getLogger("diskferry.control")
ENCRYPTED = "Encrypted"
UNENCRYPTED_MESSAGE = (
    "spec.config.encryption is none: the repository's data and metadata are stored unencrypted"
)
VALIDATION_SECONDS = 60.0
"""How often a location is looked at when its spec does not say (Velero's default, 1m)."""
SYNC_SECONDS = 60.0
"""How often its Backups are synced when its spec does not say (Velero's default, 1m)."""


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


def _for_manifest(error: DiskferryError, location: Location | None) -> str:
    """What `error` means for the location's manifest: the field to set where the engine
    would name a command line option."""
    if location is not None and location.password is None and isinstance(error, PasswordError):
        return (
            f"the repository at {location.url} is encrypted: set spec.encryptionSecretRef to "
            "the key of a Secret that holds its password"
        )
    if location is not None and isinstance(error, RepositoryNotFoundError):
        return (
            f"there is no repository at {location.url}, and a ReadOnly location makes none: "
            "set spec.accessMode: ReadWrite to have it made"
        )
    return error.message


class BackupStorageLocationReconciler:
    """Validates each location's repository, creating it when absent."""

    info = BACKUP_STORAGE_LOCATIONS

    def __init__(self, client: Client, clock: Clock | None = None) -> None:
        self.client = client
        self.clock = clock or Clock()

    def reconcile(self, obj: BackupStorageLocation) -> Result:
        """Validate the location and sync its Backups when due; look again at the next time
        one of them is due."""
        if obj.metadata.deletion_timestamp is not None:
            return Result.done()
        now = self.clock.now()
        validate = self._validation_due(obj, now)
        if validate is not None and validate <= 0:
            obj = self._validate(obj, now)
            validate = frequency(obj) or None
        sync = self._sync_due(obj, now) if available(obj) else None
        if sync is not None and sync <= 0:
            self._sync(obj, now)
            sync = sync_period(obj)
        waits = [w for w in (validate, sync) if w]
        return Result.requeue(min(waits)) if waits else Result.done()

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

    def _sync(self, obj: BackupStorageLocation, now: datetime) -> None:
        """Make the Backups the repository holds and this host lacks, delete the synced ones
        it holds no more; a repository that cannot be read is a Warning Event."""
        try:
            synced = sync_backups(self.client, obj, location_of(self.client, obj))
        except DiskferryError as e:
            self.client.event(
                obj, "Warning", "SyncFailed", f"the Backups were not synced: {e.message}"
            )
            return
        fields = {"lastSyncedTime": rfc3339(now), "lastSyncedRevision": synced.revision}
        self.client.patch_status(obj, fields)
        if synced.made or synced.deleted:
            made = ", ".join(synced.made) or "none"
            deleted = ", ".join(synced.deleted) or "none"
            message = (
                f"Backups synced from the repository: made {made}; deleted, their metadata "
                f"gone: {deleted}"
            )
            self.client.event(obj, "Normal", "BackupsSynced", message)

    def _validate(self, obj: BackupStorageLocation, now: datetime) -> BackupStorageLocation:
        fields: dict[str, Any]
        unencrypted = False
        location: Location | None = None
        try:
            location = location_of(self.client, obj)
            repo_id, made = open_or_create(location, obj.spec.access_mode == "ReadWrite")
        except DiskferryError as e:
            phase, reason = BSLPhase.UNAVAILABLE, e.reason
            message = f"the repository cannot be opened: {_for_manifest(e, location)}"
            fields = {"message": message}
        else:
            phase, reason = BSLPhase.AVAILABLE, "RepositoryCreated" if made else "Available"
            said = "created the repository" if made else "the repository opens"
            message = f"{said} {repo_id} at {location.url}"
            fields = {"message": message, "repositoryID": repo_id}
            unencrypted = location.password is None
            fields["conditions"] = self._encrypted(obj, not unencrypted)
        before = obj.status.phase
        obj = self.client.patch_status(
            obj,
            {
                **fields,
                "phase": phase.value,
                "lastValidationTime": rfc3339(now),
                "observedGeneration": obj.metadata.generation,
            },
        )
        if before != phase or reason == "RepositoryCreated":
            warning = phase == BSLPhase.UNAVAILABLE
            self.client.event(obj, "Warning" if warning else "Normal", reason, message)
            if warning:
                log.warning("%s is Unavailable: %s", tag(obj), message)
            elif unencrypted:
                self.client.event(obj, "Warning", "Unencrypted", UNENCRYPTED_MESSAGE)
        return obj

    @staticmethod
    def _encrypted(obj: BackupStorageLocation, encrypted: bool) -> list[dict[str, Any]]:
        """The conditions with `Encrypted` saying whether the repository is."""
        conditions = [c.to_json() for c in obj.status.conditions]
        if encrypted:
            return set_condition(
                conditions, ENCRYPTED, True, "PasswordSet", "the repository is encrypted"
            )
        return set_condition(
            conditions, ENCRYPTED, False, "EncryptionDisabled", UNENCRYPTED_MESSAGE
        )
