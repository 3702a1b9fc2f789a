"""A job's credential files (a pull's auth.json) are gone once the job ended, however it ended;
a failed job's scratch is kept without them."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
from control_support import wait_until

from diskferry.control.reconcilers.disks.importjob import Imports, Source
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.local import JobStartError, LocalRunner
from diskferry.importer import ImportJob

MiB = 1 << 20
AUTH = json.dumps({"auths": {"example.invalid": {"auth": "dXNlcjpwYXNz"}}}).encode()


def _ended(runner: LocalRunner, job_id: str):
    return wait_until(lambda: (s := runner.state(job_id)) and not s.running and s)


def test_a_failed_pull_keeps_its_scratch_but_not_its_auth_file(registry, tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    claim = SimpleNamespace(block=False, path=str(tmp_path / "disk.raw"))
    source = Source(registry.ref("missing/disk:latest"), authfile=AUTH, insecure=True)
    Imports(runner).step("pull-1", claim, source, None)
    job_dir = tmp_path / "data/jobs/pull-1"
    assert (job_dir / "auth.json").read_bytes() == AUTH
    state = _ended(runner, "pull-1")
    assert state.failed
    assert not (job_dir / "auth.json").exists()
    assert runner.purge("pull-1", keep_scratch=True)
    kept = tmp_path / "data/jobs/failed/pull-1"
    assert (kept / "stderr").exists() and (kept / "scratch").is_dir()
    assert (kept / "job.json").exists() and not (kept / "auth.json").exists()


def test_a_killed_worker_loses_its_credentials_and_keeps_its_other_files(
    faulty, tmp_path: Path
) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = faulty.add("slow.img", source, piece=128 * 1024, trickle=0.05)
    runner = LocalRunner(tmp_path / "data")
    files = [JobFile("auth.json", AUTH, credential=True), JobFile("ca.pem", b"not secret")]
    runner.start("pull-2", ImportJob(source=url, target=str(tmp_path / "disk.raw")), files)
    job_dir = tmp_path / "data/jobs/pull-2"
    wait_until(lambda: (s := runner.state("pull-2")).progress and s.progress["bytesDone"] > 0)
    assert (job_dir / "auth.json").exists()
    os.killpg(json.loads((job_dir / "state.json").read_text())["pid"], signal.SIGKILL)
    assert _ended(runner, "pull-2").failed
    assert not (job_dir / "auth.json").exists()
    assert (job_dir / "ca.pem").read_bytes() == b"not secret"


def test_a_succeeded_job_found_by_a_fresh_runner_loses_its_credentials(
    faulty, tmp_path: Path
) -> None:
    source = tmp_path / "small.raw"
    source.write_bytes(os.urandom(MiB))
    url = faulty.add("small.img", source)
    job = ImportJob(source=url, target=str(tmp_path / "disk.raw"))
    LocalRunner(tmp_path / "data").start("pull-3", job, [JobFile("auth.json", AUTH, True)])
    again = LocalRunner(tmp_path / "data")
    assert _ended(again, "pull-3").succeeded
    assert not (tmp_path / "data/jobs/pull-3/auth.json").exists()


def test_a_secret_inline_is_refused_before_any_worker_runs(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    job = ImportJob(source="docker://example.invalid/disk", target="y", creds="user:pass")
    with pytest.raises(JobStartError, match="creds") as refused:
        runner.start("pull-4", job)
    assert "pass" not in str(refused.value).replace("authfile", "")
    assert runner.state("pull-4") is None
    assert not (tmp_path / "data/jobs/pull-4").exists()
