"""The bandwidth limit of backup and restore jobs: the engine moves each byte through one
bucket of the job's rate, on an injected clock (no time is measured)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from backup_support import MiB, engine_fixture, make_disk  # noqa: F401

from diskferry.backup.job import BackupJob, RestoreJob
from diskferry.disk import throttle
from diskferry.worker.job import validate_job

LIMIT = 8 * MiB


class FakeClockBucket(throttle.TokenBucket):
    """A bucket whose clock moves only when slept on; every one made is kept."""

    made: list[FakeClockBucket] = []

    def __init__(self, rate: int, burst: int | None = None) -> None:
        self.now = 0.0
        self._time_lock = threading.Lock()
        super().__init__(rate, burst, clock=self._clock_now, sleep=self._advance)
        FakeClockBucket.made.append(self)

    def _clock_now(self) -> float:
        with self._time_lock:
            return self.now

    def _advance(self, seconds: float) -> None:
        with self._time_lock:
            self.now += seconds


@pytest.fixture
def buckets(monkeypatch) -> list[FakeClockBucket]:
    FakeClockBucket.made = []
    monkeypatch.setattr(throttle, "TokenBucket", FakeClockBucket)
    return FakeClockBucket.made


def test_a_job_file_carries_the_limit_and_refuses_zero() -> None:
    job = validate_job(
        BackupJob,
        {"kind": "backup", "repo": "/r", "vm": "vm", "disks": [{"name": "d", "path": "/d"}],
         "bandwidthLimit": LIMIT},
    )  # fmt: skip
    assert job.bandwidth_limit == LIMIT
    restore = {"kind": "restore", "repo": "/r", "snapshot": "s", "target": "/t"}
    assert validate_job(RestoreJob, restore).bandwidth_limit is None
    with pytest.raises(ValueError, match="bandwidthLimit"):
        validate_job(RestoreJob, {**restore, "bandwidthLimit": 0})


def test_backup_and_restore_move_their_bytes_at_the_jobs_rate(engine, tmp_path, buckets):
    volume = make_disk(tmp_path / "disk.raw", tracked=False)
    result = engine.backup(disks={"d": volume}, bandwidth_limit=LIMIT)
    [read] = buckets
    assert read.rate == LIMIT
    assert read.taken == result.disks[0].bytes_read > 4 * MiB
    assert read.now >= (read.taken - read.burst) / LIMIT
    restored = engine.restore(
        result.disks[0].snapshot, tmp_path / "out.raw", bandwidth_limit=LIMIT // 2
    )
    written = buckets[1]
    assert written.rate == LIMIT // 2
    assert written.taken == restored.bytes_written > 4 * MiB
    assert written.now >= (written.taken - written.burst) / (LIMIT // 2)
    assert (tmp_path / "out.raw").read_bytes() == Path(volume).read_bytes()


def test_no_limit_makes_no_bucket(engine, tmp_path, buckets):
    volume = make_disk(tmp_path / "disk.raw", tracked=False)
    result = engine.backup(disks={"d": volume})
    engine.restore(result.disks[0].snapshot, tmp_path / "out.raw")
    assert buckets == []
