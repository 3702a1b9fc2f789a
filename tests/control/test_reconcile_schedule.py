"""Schedules and Backup ttl through the daemon on a manual clock, with the real engines: a run
at its cron time, paused, a bad cron, missed runs while down, the keep policy, ttl expiry."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from backup_restore_support import apply, base, disk, documents, get, wait_for
from control_support import stop_workers_under, wait_until
from reconcile_support import Daemon

from diskferry.backup.check import check
from diskferry.backup.metadata import load_metadata
from diskferry.backup.repository import Repository
from diskferry.control.clock import ManualClock
from diskferry.control.resources.registry import REGISTRY

__all__ = ["base"]

START = datetime(2026, 1, 1, 0, 30, tzinfo=UTC)
PASSWORD = "bars-secret"
LABEL = "diskferry.io/schedule-name"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def daemon(base: Path, clock: ManualClock) -> Iterator[Daemon]:
    running = Daemon(base / "data", clock=clock)
    yield running
    running.stop()
    stop_workers_under(base)


def location(base: Path, vm: bool = True) -> list[dict[str, Any]]:
    """The mover config, the password Secret, the location in `base`, and vm-a when `vm`."""
    return documents("backup-restore.yaml", base / "backups")[: 4 if vm else 3]


def schedule(name: str, cron: str = "0 * * * *", **spec: Any) -> dict[str, Any]:
    """A Schedule in default backing up the VMs labelled app=web (another `app` by `select`)."""
    template = {
        "includedNamespaces": ["default"],
        "labelSelector": {"matchLabels": {"app": spec.pop("select", "web")}},
        "storageLocation": "repo",
    }
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "Schedule",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedule": cron, "template": template, **spec},
    }


def backup_doc(name: str, **spec: Any) -> dict[str, Any]:
    """A Backup in default of the VMs labelled app=web."""
    body = {"includedNamespaces": ["default"], "labelSelector": {"matchLabels": {"app": "web"}}}
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {**body, "storageLocation": "repo", **spec},
    }


def poke(daemon: Daemon, kind: str, name: str) -> None:
    """Change an annotation, so that the object is reconciled at once (the clock moved)."""
    daemon.objects.patch(
        REGISTRY.by_kind(kind),
        "default",
        name,
        {"metadata": {"annotations": {"poke": str(datetime.now(UTC).timestamp())}}},
        "merge",
    )


def made_by(daemon: Daemon, name: str) -> list[dict[str, Any]]:
    """The Backups the Schedule `name` made, by name."""
    found = daemon.objects.list(
        REGISTRY.by_kind("Backup"), "default", label_selector=f"{LABEL}={name}"
    )
    return sorted(found.items, key=lambda b: b["metadata"]["name"])


def snapshot_ids(base: Path) -> set[str]:
    """The ids of the snapshots in the location's repository."""
    with Repository.open(str(base / "backups"), PASSWORD) as repo:
        return {s.id for s in repo.list_snapshots()}


def snapshot_of(backup: dict[str, Any]) -> str:
    [volume] = backup["status"]["volumes"]
    return volume["snapshotID"]


def reasons(daemon: Daemon, name: str) -> set[str]:
    return {e["reason"] for e in daemon.events(name)}


def status_of(daemon: Daemon, name: str, has: str) -> dict[str, Any]:
    """The Schedule's status once it has the field `has`."""
    return wait_until(
        lambda: (
            (s := (get(daemon, "Schedule", "default", name) or {}).get("status", {})).get(has) and s
        ),
        60,
    )


def fire(daemon: Daemon, clock: ManualClock, name: str, at: datetime) -> dict[str, Any]:
    """Move the clock to `at`, wake the Schedule, and return the Backup it made, ended."""
    clock.advance((at - clock.now()).total_seconds())
    poke(daemon, "Schedule", name)
    backup = f"{name}-{at:%Y%m%d%H%M%S}"
    return wait_for(daemon, "Backup", "default", backup, "Completed", "PartiallyFailed", "Failed")


def test_a_schedule_makes_its_backup_at_the_cron_time(base, daemon, clock) -> None:
    disk(daemon, "vd-a", b"scheduled" * 300)
    apply(daemon, [*location(base), schedule("hourly")])
    status = status_of(daemon, "hourly", "nextRun")
    assert (status["phase"], status["nextRun"]) == ("Enabled", "2026-01-01T01:00:00Z")
    assert made_by(daemon, "hourly") == []

    at = datetime(2026, 1, 1, 1, 0, 5, tzinfo=UTC)
    backup = fire(daemon, clock, "hourly", at)
    assert backup["status"]["phase"] == "Completed", backup["status"]
    assert backup["metadata"]["name"] == "hourly-20260101010005"
    assert backup["metadata"]["labels"][LABEL] == "hourly"
    assert backup["spec"]["storageLocation"] == "repo"
    assert snapshot_of(backup) in snapshot_ids(base)
    status = status_of(daemon, "hourly", "lastBackup")
    assert status["lastBackup"] == "2026-01-01T01:00:05Z"
    assert status["nextRun"] == "2026-01-01T02:00:00Z"
    assert "missedRuns" not in status
    assert "BackupCreated" in reasons(daemon, "hourly")
    assert [b["metadata"]["name"] for b in made_by(daemon, "hourly")] == ["hourly-20260101010005"]


def test_a_paused_schedule_makes_no_backup(base, daemon, clock) -> None:
    apply(daemon, [*location(base, vm=False), schedule("idle", paused=True)])
    status_of(daemon, "idle", "nextRun")
    clock.advance(2 * 3600)
    poke(daemon, "Schedule", "idle")
    status = status_of(daemon, "idle", "lastSkipped")
    assert status["lastSkipped"] == "2026-01-01T02:30:00Z"
    assert "lastBackup" not in status
    scheduled = next(c for c in status["conditions"] if c["type"] == "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Paused")
    assert made_by(daemon, "idle") == []


def test_a_bad_cron_expression_fails_validation(daemon) -> None:
    apply(daemon, [schedule("broken", cron="61 * * * *")])
    status = wait_for(daemon, "Schedule", "default", "broken", "FailedValidation")["status"]
    [error] = status["validationErrors"]
    assert error.startswith("spec.schedule: invalid cron expression '61 * * * *'")
    assert "nextRun" not in status
    wait_until(lambda: "FailedValidation" in reasons(daemon, "broken"))
    assert made_by(daemon, "broken") == []


@pytest.mark.parametrize(
    ("cron", "error"),
    [
        ("@every 1 minute", "invalid @every duration"),
        ("0 * * * * *", "expected exactly 5 fields, found 6"),
    ],
)
def test_what_velero_refuses_fails_validation(daemon, cron: str, error: str) -> None:
    apply(daemon, [schedule("broken", cron=cron)])
    status = wait_for(daemon, "Schedule", "default", "broken", "FailedValidation")["status"]
    assert error in status["validationErrors"][0]


def test_every_runs_that_long_after_the_last_run(base, daemon, clock) -> None:
    apply(daemon, [*location(base, vm=False), schedule("often", cron="@every 1m30s")])
    assert status_of(daemon, "often", "nextRun")["nextRun"] == "2026-01-01T00:31:30Z"
    backup = fire(daemon, clock, "often", datetime(2026, 1, 1, 0, 31, 40, tzinfo=UTC))
    assert backup["metadata"]["name"] == "often-20260101003140"
    status = status_of(daemon, "often", "lastBackup")
    assert status["nextRun"] == "2026-01-01T00:33:10Z"


def test_a_descriptor_names_its_times(base, daemon) -> None:
    apply(daemon, [*location(base, vm=False), schedule("daily", cron="@daily")])
    assert status_of(daemon, "daily", "nextRun")["nextRun"] == "2026-01-02T00:00:00Z"


@pytest.mark.parametrize("skip", [True, False])
def test_skip_immediately_skips_what_is_due_at_unpause(base, daemon, clock, skip) -> None:
    apply(daemon, [*location(base, vm=False), schedule("held", paused=True, select="none")])
    status_of(daemon, "held", "nextRun")
    clock.advance(40 * 60)  # 01:00 passes while paused, before the Schedule is looked at again
    spec: dict[str, Any] = {"paused": False, "skipImmediately": skip}
    daemon.objects.patch(REGISTRY.by_kind("Schedule"), "default", "held", {"spec": spec}, "merge")
    if skip:
        status = status_of(daemon, "held", "lastSkipped")
        assert status["lastSkipped"] == "2026-01-01T01:10:00Z"
        assert status["nextRun"] == "2026-01-01T02:00:00Z"
        wait_until(
            lambda: get(daemon, "Schedule", "default", "held")["spec"]["skipImmediately"] is False
        )
        assert "SkippedImmediately" in reasons(daemon, "held")
        assert made_by(daemon, "held") == []
    else:
        assert status_of(daemon, "held", "lastBackup")["lastBackup"] == "2026-01-01T01:10:00Z"
        assert [b["metadata"]["name"] for b in made_by(daemon, "held")] == ["held-20260101011000"]


def test_the_template_metadata_labels_the_backups(base, daemon, clock) -> None:
    doc = schedule("labelled", select="none")
    doc["metadata"]["labels"] = {"team": "schedule-own"}
    doc["spec"]["template"]["metadata"] = {"labels": {"tier": "gold"}}
    apply(daemon, [*location(base, vm=False), doc])
    status_of(daemon, "labelled", "nextRun")
    backup = fire(daemon, clock, "labelled", datetime(2026, 1, 1, 1, 0, 5, tzinfo=UTC))
    assert backup["metadata"]["labels"] == {"tier": "gold", LABEL: "labelled"}


def test_backups_owned_by_their_schedule_go_with_it(base, daemon, clock) -> None:
    doc = schedule("owning", select="none", useOwnerReferencesInBackup=True)
    apply(daemon, [*location(base, vm=False), doc])
    status_of(daemon, "owning", "nextRun")
    backup = fire(daemon, clock, "owning", datetime(2026, 1, 1, 1, 0, 5, tzinfo=UTC))
    [owner] = backup["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Schedule", "owning")
    daemon.objects.delete(REGISTRY.by_kind("Schedule"), "default", "owning")
    wait_until(lambda: get(daemon, "Backup", "default", backup["metadata"]["name"]) is None, 60)


def test_runs_missed_while_down_get_one_catch_up_run(base, clock) -> None:
    first = Daemon(base / "data", clock=clock)
    try:
        apply(first, [*location(base, vm=False), schedule("hourly", select="none")])
        assert status_of(first, "hourly", "nextRun")["nextRun"] == "2026-01-01T01:00:00Z"
    finally:
        first.stop()
    clock.advance(3 * 3600)  # 01:00, 02:00 and 03:00 pass while no daemon runs
    again = Daemon(base / "data", clock=clock)
    try:
        missed = status_of(again, "hourly", "missedRuns")["missedRuns"]
        assert missed == {
            "count": 3,
            "since": "2026-01-01T01:00:00Z",
            "caughtUp": "2026-01-01T03:30:00Z",
        }
        wait_for(again, "Backup", "default", "hourly-20260101033000", "Completed")
        status = get(again, "Schedule", "default", "hourly")["status"]
        assert status["lastBackup"] == "2026-01-01T03:30:00Z"
        assert status["nextRun"] == "2026-01-01T04:00:00Z"
        condition = next(c for c in status["conditions"] if c["type"] == "MissedRuns")
        assert condition["status"] == "True" and "3 scheduled runs missed" in condition["message"]
        assert [b["metadata"]["name"] for b in made_by(again, "hourly")] == [
            "hourly-20260101033000"
        ]
        [event] = [e for e in again.events("hourly") if e["reason"] == "MissedRuns"]
        assert "since 2026-01-01T01:00:00Z" in event["message"]
    finally:
        again.stop()
        stop_workers_under(base)


def test_the_keep_policy_forgets_older_backups_and_prunes(
    base, daemon, clock, repositories_opened_by_reconcilers
) -> None:
    path = disk(daemon, "vd-a", b"first" * 4000)
    apply(daemon, [*location(base), schedule("hourly", keep={"keepLast": 1})])
    status_of(daemon, "hourly", "nextRun")
    older = fire(daemon, clock, "hourly", datetime(2026, 1, 1, 1, 0, 1, tzinfo=UTC))
    assert older["status"]["phase"] == "Completed", older["status"]
    with open(path, "r+b") as f:
        f.seek(1 << 20)
        f.write(b"second" * 4000)
    newer = fire(daemon, clock, "hourly", datetime(2026, 1, 1, 2, 0, 1, tzinfo=UTC))
    assert newer["status"]["phase"] == "Completed", newer["status"]

    retention = wait_until(
        lambda: (
            (r := get(daemon, "Schedule", "default", "hourly")["status"].get("retention"))
            and r["judged"] == "hourly-20260101020001"
            and r.get("pruned")
            and r
        ),
        60,
    )
    assert retention["forgottenSnapshots"] == [snapshot_of(older)]
    assert retention["deletedBackups"] == ["hourly-20260101010001"]
    assert retention["bytesFreed"] > 0
    assert snapshot_ids(base) == {snapshot_of(newer)}
    wait_until(lambda: get(daemon, "Backup", "default", "hourly-20260101010001") is None, 30)
    assert [b["metadata"]["name"] for b in made_by(daemon, "hourly")] == ["hourly-20260101020001"]
    assert {"Forgotten", "Pruned"} <= reasons(daemon, "hourly")
    with Repository.open(str(base / "backups"), PASSWORD) as repo:
        assert load_metadata(repo, "default.hourly-20260101010001") is None
        assert load_metadata(repo, "default.hourly-20260101020001") is not None
        assert check(repo).ok
    assert repositories_opened_by_reconcilers == []


def test_a_backup_past_its_ttl_goes_with_its_snapshots_only(base, daemon, clock) -> None:
    path = disk(daemon, "vd-a", b"kept" * 4000)
    apply(daemon, [*location(base), backup_doc("kept")])
    kept = wait_for(daemon, "Backup", "default", "kept", "Completed", "Failed")
    assert kept["status"]["phase"] == "Completed", kept["status"]
    with open(path, "r+b") as f:
        f.seek(1 << 20)
        f.write(b"short-lived" * 4000)
    apply(daemon, [backup_doc("short", ttl="1h")])
    short = wait_for(daemon, "Backup", "default", "short", "Completed", "Failed")
    assert short["status"]["phase"] == "Completed", short["status"]
    assert short["status"]["expiration"] == "2026-01-01T01:30:00Z"
    assert snapshot_ids(base) == {snapshot_of(kept), snapshot_of(short)}
    uploads = [v["dataUpload"] for v in short["status"]["volumes"]]
    assert all(get(daemon, "DataUpload", "default", u) for u in uploads)

    clock.advance(3601)
    poke(daemon, "Backup", "short")
    wait_until(lambda: get(daemon, "Backup", "default", "short") is None, 60)
    wait_until(lambda: not any(get(daemon, "DataUpload", "default", u) for u in uploads), 60)
    assert snapshot_ids(base) == {snapshot_of(kept)}
    assert get(daemon, "Backup", "default", "kept") is not None
    assert {"Expired", "DataDeleted"} <= reasons(daemon, "short")
    [deleted] = [e for e in daemon.events("short") if e["reason"] == "DataDeleted"]
    assert deleted["message"].startswith("1 snapshots forgotten; prune freed ")
    with Repository.open(str(base / "backups"), PASSWORD) as repo:
        assert load_metadata(repo, "default.short") is None
        assert load_metadata(repo, "default.kept") is not None
        assert check(repo).ok


def test_a_backup_with_a_ttl_deleted_while_it_runs_leaves_no_snapshot(base, daemon) -> None:
    disk(daemon, "vd-a", b"interrupted" * 4000)
    apply(daemon, [*location(base), backup_doc("doomed", ttl="720h")])
    running = wait_for(daemon, "Backup", "default", "doomed", "InProgress", "Completed")
    assert "diskferry.io/cleanup" in running["metadata"]["finalizers"]
    daemon.objects.delete(REGISTRY.by_kind("Backup"), "default", "doomed")
    wait_until(lambda: get(daemon, "Backup", "default", "doomed") is None, 60)
    wait_until(lambda: get(daemon, "DataUpload", "default", "doomed-vm-a") is None, 60)
    assert snapshot_ids(base) == set()
    with Repository.open(str(base / "backups"), PASSWORD) as repo:
        assert load_metadata(repo, "default.doomed") is None
        assert check(repo).ok
