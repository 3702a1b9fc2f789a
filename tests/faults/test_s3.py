"""Backups and restores with a moto S3 server behind a relay that breaks connections: a
correct retry or one error line naming the store, a repository that checks, exact restores."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from relay import Fault

sys.path.insert(0, str(Path(__file__).parent.parent / "objstore"))

from s3server import ACCESS_KEY, SECRET_KEY, make_bucket, running_moto

MiB = 1 << 20
BUCKET = "diskferry-faults"


@pytest.fixture(scope="module")
def moto():
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture
def s3(moto, relay, diskferry, tmp_path):
    """A relay to moto, a fresh repository through it, and a disk with 6 MiB of data."""
    parts = urlsplit(moto)
    r = relay((parts.hostname, parts.port))
    diskferry.env.update(
        DISKFERRY_PASSWORD="pw",
        DISKFERRY_CACHE_DIR=str(tmp_path / "cache"),
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=SECRET_KEY,
        AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{r.address}",
    )
    url = f"s3://{BUCKET}/{uuid.uuid4().hex}"
    made = diskferry("repo", "init", "--repo", url)
    assert made.code == 0, made.stderr
    disk = tmp_path / "disk.raw"
    with open(disk, "wb") as f:
        f.truncate(32 * MiB)
        f.seek(3 * MiB)
        f.write(os.urandom(6 * MiB))
    return r, url, disk


def _backup(diskferry, url, disk):
    return diskferry("backup", "--repo", url, "--vm", "vm", "--disk", f"d={disk}", "--no-progress")


def _restores_exactly(diskferry, url, disk, tmp_path) -> bool:
    out = tmp_path / "out.raw"
    args = ("restore", "latest", out, "--force", "--vm", "vm", "--disk", "d", "--repo", url)
    done = diskferry(*args, "--no-progress")
    assert done.code == 0, done.stderr
    return out.read_bytes() == disk.read_bytes()


def _checks(diskferry, url) -> None:
    checked = diskferry("repo", "check", "--read-data", "--repo", url, "--no-progress")
    assert checked.code == 0, checked.stderr


@pytest.mark.parametrize(
    "fault",
    [
        Fault("drop"),
        Fault("reset", at=200_000, direction="up"),
        Fault("reset", at=100, times=3),
        Fault("drop", at=1000, direction="up", times=2),
    ],
    ids=["drop-answer", "reset-upload", "reset-answers", "drop-uploads"],
)
def test_a_broken_connection_is_retried(diskferry, s3, tmp_path, fault):
    r, url, disk = s3
    r.arm(fault)
    done = _backup(diskferry, url, disk)
    assert done.code == 0, done.stderr
    assert r.fired == fault.times
    r.arm(None)
    _checks(diskferry, url)
    assert _restores_exactly(diskferry, url, disk, tmp_path)


def _fails_then_succeeds(diskferry, s3, tmp_path, fault: Fault) -> str:
    r, url, disk = s3
    r.arm(fault)
    failed = _backup(diskferry, url, disk)
    assert failed.code == 1, failed.stderr
    assert r.fired >= 1
    r.arm(None)
    _checks(diskferry, url)
    again = _backup(diskferry, url, disk)
    assert again.code == 0, again.stderr
    _checks(diskferry, url)
    assert _restores_exactly(diskferry, url, disk, tmp_path)
    return failed.error


def test_a_byte_flipped_on_the_way_up_is_caught(diskferry, s3, tmp_path):
    error = _fails_then_succeeds(diskferry, s3, tmp_path, Fault("flip", 300_000, "up"))
    assert error.startswith(s3[1])
    assert "damaged on the way" in error


def test_a_truncated_upload_fails_naming_the_store(diskferry, s3, tmp_path):
    error = _fails_then_succeeds(diskferry, s3, tmp_path, Fault("truncate", 100_000, "up"))
    assert error.startswith(s3[1])


def test_a_store_that_always_resets_fails_naming_it(diskferry, s3, tmp_path):
    error = _fails_then_succeeds(diskferry, s3, tmp_path, Fault("reset", times=1000))
    assert s3[1] in error


def test_a_byte_flipped_on_the_way_down_fails_the_restore(diskferry, s3, tmp_path):
    r, url, disk = s3
    assert _backup(diskferry, url, disk).code == 0
    r.arm(Fault("flip", at=300_000))
    out = tmp_path / "out.raw"
    args = ("restore", "latest", out, "--vm", "vm", "--disk", "d", "--repo", url, "--no-progress")
    failed = diskferry(*args)
    assert r.fired == 1
    assert failed.code == 1, failed.stderr
    assert url in failed.error or "damaged" in failed.error
    assert not out.exists()
    r.arm(None)
    assert _restores_exactly(diskferry, url, disk, tmp_path)
