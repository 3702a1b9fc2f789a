"""Backups killed with SIGKILL at random moments lose nothing and leave a repository that checks.

DISKFERRY_CRASH_RUNS sets the number of killed runs (10 by default).
"""

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from backup_support import (  # noqa: F401
    PASSWORD,
    KiB,
    MiB,
    engine_fixture,
    make_disk,
    write,
    write_random,
)

from diskferry.backup.check import check
from diskferry.backup.engine import run_backup
from diskferry.backup.job import BackupJob, DiskSource
from diskferry.backup.repository import Repository
from diskferry.base.errors import CancelledError
from diskferry.disk.progress import Progress

RUNS = int(os.environ.get("DISKFERRY_CRASH_RUNS", "10"))


def _start(job_file) -> tuple[subprocess.Popen, float]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "diskferry.backup.worker", str(job_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    assert "port" in json.loads(proc.stdout.readline())  # the job has started
    return proc, time.monotonic()


def _wait_released(overlay: str) -> None:
    """Wait until the storage daemon of a killed backup, ended by its parent's death, is gone."""
    deadline = time.monotonic() + 20
    while subprocess.run(["qemu-img", "info", overlay], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, f"{overlay} stays locked"
        time.sleep(0.05)


def _snapshot_ids(url: str) -> set[str]:
    with Repository.open(url, PASSWORD) as repo:
        return {s.id for s in repo.list_snapshots()}


@pytest.mark.long
def test_backups_killed_at_random_moments(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    job_file = tmp_path / "job.json"
    job_file.write_text(
        json.dumps(
            {
                "kind": "backup",
                "repo": engine.url,
                "vm": "vm",
                "disks": [{"name": "d", "path": volume}],
            }
        )
    )
    proc, started = _start(job_file)
    assert proc.wait(60) == 0, "an undisturbed backup succeeds"
    span = time.monotonic() - started
    seen = _snapshot_ids(engine.url)
    engine.keep(next(iter(seen)), volume)

    rnd = random.Random(int(os.environ.get("DISKFERRY_CRASH_SEED", "11")))
    outcomes = []
    for run in range(RUNS):
        for _ in range(4):
            write(overlay, rnd.randrange(0, 32 * MiB - 256 * KiB), rnd.randrange(1, 256 * KiB), run)
        proc, started = _start(job_file)
        time.sleep(max(0.0, started + rnd.uniform(0, span * 1.2) - time.monotonic()))
        proc.send_signal(signal.SIGKILL)
        outcomes.append(proc.wait(60))
        _wait_released(overlay)
        made = _snapshot_ids(engine.url) - seen
        seen |= made
        for snapshot in made:  # a snapshot saved before the kill holds the disk as it was then
            engine.keep(snapshot, volume)
        with Repository.open(engine.url, PASSWORD) as repo:
            report = check(repo)
        assert report.ok, report.summary()

    assert any(code == -signal.SIGKILL for code in outcomes), "some runs were killed"
    final = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(final.snapshot, volume)
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot), snapshot
    assert not [n for n in os.listdir(tmp_path) if "fleece" in n]


class _CancelAfter(Progress):
    """Sets `cancel` once `limit` bytes are done."""

    def __init__(self, cancel: threading.Event, limit: int) -> None:
        super().__init__()
        self.cancel, self.limit = cancel, limit

    def add(self, n: int) -> None:
        super().add(n)
        if self.done >= self.limit:
            self.cancel.set()


def test_a_cancelled_backup_leaves_nothing_and_loses_nothing(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    first = engine.backup(disks={"d": volume}).disks[0]
    with Repository.open(engine.url, PASSWORD) as repo:
        packs = {p.path for p in repo.store.list("packs/")}
        tracker = repo.load_tracker("vm")
    for block in range(0, 256, 8):
        write_random(overlay, block * 128 * KiB, 64 * KiB)
    cancel = threading.Event()
    job = BackupJob(repo=engine.url, vm="vm", disks=[DiskSource(name="d", path=volume)])
    with pytest.raises(CancelledError):
        run_backup(job, _CancelAfter(cancel, 256 * KiB), cancel)
    with Repository.open(engine.url, PASSWORD) as repo:
        assert {p.path for p in repo.store.list("packs/")} == packs
        assert [s.id for s in repo.list_snapshots()] == [first.snapshot]
        assert repo.load_tracker("vm") == tracker
        assert list(repo.store.list("locks/")) == []
    assert not [n for n in os.listdir(tmp_path) if "fleece" in n]
    again = engine.backup(disks={"d": volume}).disks[0]
    assert again.type == "incremental" and again.bytes_read == 32 * 64 * KiB
    engine.keep(again.snapshot, volume)
    assert engine.restores_exactly(again.snapshot)


def test_a_cancel_stops_the_walk_that_sizes_the_backup(engine, tmp_path):
    sock, log = tmp_path / "nbdkit.sock", tmp_path / "nbdkit.log"
    # 256 GiB of scattered data: nbdkit answers block status 1 GiB at a time
    plugin = ["sparse-random", "256G", "runlength=65536", f"logfile={log}"]
    server = subprocess.Popen(["nbdkit", "-f", "-U", str(sock), "--filter=log", *plugin])
    try:
        deadline = time.monotonic() + 15
        while not sock.exists():
            assert time.monotonic() < deadline and server.poll() is None, "nbdkit did not start"
            time.sleep(0.02)
        cancel = threading.Event()
        cancel.set()
        url = f"nbd+unix:///?socket={sock}"
        job = BackupJob(repo=engine.url, vm="vm", disks=[DiskSource(name="d", path=url)])
        with pytest.raises(CancelledError):
            run_backup(job, Progress(), cancel)
    finally:
        server.terminate()
        server.wait(10)
    asked = [ln for ln in log.read_text().splitlines() if " Extents " in ln and "offset=" in ln]
    assert len(asked) <= 8  # the whole walk asks 256 times
    with Repository.open(engine.url, PASSWORD) as repo:
        assert repo.list_snapshots() == []
        assert list(repo.store.list("packs/")) == []
        assert list(repo.store.list("locks/")) == []
