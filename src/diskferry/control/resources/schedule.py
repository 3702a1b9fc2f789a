"""Schedule: Velero's shape — a Backup made from a template at each time a cron expression, a
descriptor or `@every <duration>` names, with the backup engine's keep policy saying which of
the Schedule's Backups stay."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.backup.policy import KeepPolicy
from diskferry.control.resources.backup import BackupSpec
from diskferry.control.resources.common import ApiVersion
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
    Status,
)

SCHEDULE_NAME = "diskferry.io/schedule-name"
"""The label of the Backups a Schedule made."""
SCHEDULED = "Scheduled"
MISSED_RUNS = "MissedRuns"


class ScheduleSpec(ApiModel):
    """When (a cron expression, UTC), what (a Backup spec), and how many of them stay."""

    schedule: str = Field(
        description="When to back up, in UTC: a cron expression of 5 fields, a descriptor "
        "(@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly), or "
        "@every <duration> (@every 1h30m: from the Schedule's last run, or its creation)."
    )
    template: BackupSpec = Field(description="The spec of each Backup made.")
    paused: bool = Field(
        default=False, description="true: no Backup is made; the times passed are lastSkipped."
    )
    skip_immediately: bool | None = Field(
        default=None,
        alias="skipImmediately",
        description="true: a run due right when the Schedule is created or unpaused is skipped "
        "(lastSkipped), and the field is set back to false. Default false.",
    )
    keep: KeepPolicy | None = Field(
        default=None,
        description="Which of the Schedule's Backups stay, judged for each disk of each VM once "
        "the newest of them ended: the snapshots no rule keeps are forgotten, a Backup left "
        "with none is deleted, and the repository is pruned (diskferry's; Velero keeps each "
        "Backup for its ttl). Default: none, each Backup stays for its ttl.",
    )
    use_owner_references_in_backup: bool | None = Field(
        default=None,
        alias="useOwnerReferencesInBackup",
        description="true: the Backups made are owned by the Schedule, and deleted (with their "
        "data) when it is. Default false.",
    )


class SchedulePhase(StrEnum):
    """Velero's Schedule phases."""

    NEW = "New"
    ENABLED = "Enabled"
    FAILED_VALIDATION = "FailedValidation"


class MissedRuns(ApiModel):
    """The times that passed without a run (the daemon was down), and the one run made for them."""

    count: int = Field(description="How many due times were missed.")
    since: str = Field(description="The first of them, in RFC 3339.")
    caught_up: str = Field(
        alias="caughtUp", description="When the one catch-up Backup was made, in RFC 3339."
    )


class Retention(ApiModel):
    """What the keep policy did after the newest of the Schedule's Backups ended."""

    judged: str = Field(description="The newest ended Backup when the policy was applied.")
    forgotten_snapshots: list[str] = Field(
        default_factory=list,
        alias="forgottenSnapshots",
        description="The snapshots the policy let go, forgotten in the repository.",
    )
    deleted_backups: list[str] = Field(
        default_factory=list,
        alias="deletedBackups",
        description="The Backups deleted because all their snapshots went.",
    )
    pruned: bool = Field(
        default=False,
        description="Whether the repository was pruned since, freeing what no snapshot uses.",
    )
    bytes_freed: int | None = Field(
        default=None, alias="bytesFreed", description="The bytes the prune freed."
    )


class ScheduleStatus(Status):
    """The phase, the last run and skip, the next run, and what retention did last."""

    phase: SchedulePhase | None = Field(
        default=None, description="New, Enabled, or FailedValidation (see validationErrors)."
    )
    last_backup: datetime | None = Field(
        default=None, alias="lastBackup", description="When the last Backup was made."
    )
    last_skipped: datetime | None = Field(
        default=None,
        alias="lastSkipped",
        description="When a run was last skipped (paused, or skipImmediately).",
    )
    next_run: datetime | None = Field(
        default=None, alias="nextRun", description="When the next Backup is due."
    )
    validation_errors: list[str] = Field(
        default_factory=list,
        alias="validationErrors",
        description="Why the Schedule is FailedValidation.",
    )
    missed_runs: MissedRuns | None = Field(
        default=None,
        alias="missedRuns",
        description="Due times that passed while the daemon was down: they get one catch-up "
        "run, not one each (the MissedRuns condition and a Warning Event say so too).",
    )
    retention: Retention | None = Field(
        default=None, description="What the keep policy did last; unset without `keep`."
    )


class Schedule(Resource):
    """Backups made on a schedule.

    At each time spec.schedule names, a Backup SCHEDULE-YYYYMMDDhhmmss labelled
    diskferry.io/schedule-name is made from the template (Event BackupCreated). Times that passed
    while the daemon was down get one catch-up run, reported in status.missedRuns, the condition
    MissedRuns and a Warning Event. Once its newest Backup has ended, the keep policy picks, of the
    snapshots its Backups made (each disk judged on its own), those that go: they are forgotten,
    the Backups left with none are deleted, then the repository is pruned (status.retention, Events
    Forgotten and Pruned).
    """

    CONDITIONS = {
        SCHEDULED: "True (Enabled, the next run as message) while Backups are made at the "
        "times spec.schedule names; False while spec.paused is set (Paused) or the Schedule "
        "is FailedValidation (the error as message).",
        MISSED_RUNS: "True (CaughtUp) when due times passed while the daemon was down and one "
        "catch-up Backup was made for them; False (OnTime) once a later run is on time.",
        **RECONCILED_CONDITION,
    }

    api_version: ApiVersion = API_VERSION
    kind: Literal["Schedule"] = "Schedule"
    spec: ScheduleSpec
    status: ScheduleStatus = Field(default_factory=ScheduleStatus)


SCHEDULES = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="Schedule",
    plural="schedules",
    model=Schedule,
    categories=("diskferry",),
    columns=(
        Column("Status", ".status.phase"),
        Column("Schedule", ".spec.schedule"),
        Column("LastBackup", ".status.lastBackup", "date"),
        Column("Next Run", ".status.nextRun", priority=1),
        Column("Paused", ".spec.paused", "boolean"),
        AGE,
    ),
)
