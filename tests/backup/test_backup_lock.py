"""One backup of a VM at a time: a second one refuses, or waits with --wait; a backup that
loses its lock stops and leaves the repository whole."""

import os
import threading
import time

import pytest
from backup_support import PASSWORD, MiB, engine_fixture, make_disk  # noqa: F401

from diskferry.backup.bounds import MAX_LOCK
from diskferry.backup.check import check
from diskferry.backup.codec import MAX_STORED
from diskferry.backup.engine import run_backup
from diskferry.backup.errors import LockedError, LockLostError
from diskferry.backup.job import BackupJob, DiskSource
from diskferry.backup.locks import LockInfo
from diskferry.backup.repository import Repository
from diskferry.disk.progress import Progress
from diskferry.objstore.store import ObjectStore

LEASE = 2.0


def test_a_second_backup_of_a_vm_refuses_or_waits(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    other = make_disk(tmp_path / "other.raw")
    with Repository.open(engine.url, PASSWORD) as repo:
        running = repo.lock("vm", "backup", vm="vm")  # what a running backup of "vm" holds
        with pytest.raises(LockedError, match="locked by backup of VM vm") as refused:
            engine.backup(disks={"d": volume})
        assert "--wait" in refused.value.message
        assert engine.backup("another-vm", {"d": other}).disks[0].type == "full"

        done: list[str] = []
        waiting = threading.Thread(
            target=lambda: done.append(engine.backup(disks={"d": volume}, wait=True).backup)
        )
        waiting.start()
        waiting.join(1.5)
        assert waiting.is_alive() and not done
        running.release()
        waiting.join(30)
    assert len(done) == 1
    with Repository.open(engine.url, PASSWORD) as repo:
        assert [s.backup for s in repo.list_snapshots("vm")] == done
        assert list(repo.store.list("locks/")) == []


class _ShortLease(BackupJob):
    """A backup job whose repository locks are leased for LEASE seconds."""

    def open_repository(self) -> Repository:
        return Repository.open(self.repo, self.password(), s3=self.s3_options(), lease=LEASE)


class _PauseReading(Progress):
    """Holds the reading threads at their first bytes until `resume` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.reading, self.resume = threading.Event(), threading.Event()

    def add(self, n: int) -> None:
        super().add(n)
        self.reading.set()
        self.resume.wait()


def test_a_backup_that_loses_its_lock_stops_with_nothing_half_written(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw", tracked=False)
    first = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(first.snapshot, volume)
    with open(volume, "r+b") as f:
        f.seek(8 * MiB)
        f.write(os.urandom(4 * MiB))
    other = ObjectStore(engine.url)
    tracker = other.get("trackers/vm", limit=MAX_STORED)
    job = _ShortLease(repo=engine.url, vm="vm", disks=[DiskSource(name="d", path=volume)])
    progress = _PauseReading()
    raised: list[BaseException] = []

    def back_up():
        try:
            run_backup(job, progress)
        except BaseException as e:
            raised.append(e)

    backup = threading.Thread(target=back_up)
    backup.start()
    try:
        assert progress.reading.wait(60)
        (shared,) = [
            o.path
            for o in other.list("locks/")
            if LockInfo.model_validate_json(other.get(o.path, limit=MAX_LOCK)).kind == "shared"
        ]
        other.delete(shared)  # as a prune on another host does to a lease it saw run out
        time.sleep(LEASE / 2 + 0.2)  # past this the lock is lost, whether or not renewal ran
        assert not other.exists(shared)
    finally:
        progress.resume.set()
        backup.join(60)
    assert len(raised) == 1 and isinstance(raised[0], LockLostError), raised
    assert raised[0].reason == "LockLost" and engine.url in raised[0].message
    assert list(other.list("locks/")) == []
    assert other.get("trackers/vm", limit=MAX_STORED) == tracker
    with Repository.open(engine.url, PASSWORD) as repo:
        assert [s.id for s in repo.list_snapshots()] == [first.snapshot]
        report = check(repo, read_data=True)
        assert report.ok, report.summary()
    again = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(again.snapshot, volume)
    assert engine.restores_exactly(again.snapshot) and engine.restores_exactly(first.snapshot)
