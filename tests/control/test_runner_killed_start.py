"""A starter killed in the middle of `LocalRunner.start` (its worker spawned but not recorded,
or recorded but not yet released): a runner made afresh over the same data directory, while
what the starter left may still run, runs the job once, with one worker, and reads its result."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from control_support import wait_until, workers_under

from diskferry.control.runtime.runner.base import JobState
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.importer import ImportJob

MiB = 1 << 20
JOB = "job-1"
_STARTER = """
import os, signal, sys
from pathlib import Path
from diskferry.control.runtime.runner import local

def die(step):
    if step == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)

local.on_start_step = die
from diskferry.importer import ImportJob
local.LocalRunner(Path(sys.argv[1])).start(
    "job-1", ImportJob(source=sys.argv[3], target=sys.argv[4])
)
"""


def _ended(runner: LocalRunner, job: ImportJob) -> JobState | None:
    """One look as a reconciler takes it: a job not started (or never run) is started."""
    state = runner.state(JOB)
    if state is None:
        runner.start(JOB, job)
        return None
    return None if state.running else state


@pytest.mark.parametrize("step", ["spawned", "recorded"])
def test_a_starter_killed_mid_start_leaves_the_job_to_run_once(
    step: str, faulty, tmp_path: Path
) -> None:
    data = os.urandom(2 * MiB)
    source = tmp_path / "source.raw"
    source.write_bytes(data)
    url = faulty.add("once.raw", source, piece=128 * 1024, trickle=0.05)
    target = tmp_path / "disk.raw"
    data_dir = tmp_path / "data"
    starter = subprocess.run(
        [sys.executable, "-c", _STARTER, str(data_dir), step, url, str(target)], check=False
    )
    assert starter.returncode == -signal.SIGKILL
    # what the starter left reads the source (it runs on) or ends (it never will)
    wait_until(lambda: faulty.seen("once.raw") or not workers_under(data_dir), 60)

    runner = LocalRunner(data_dir)
    job = ImportJob(source=url, target=str(target))
    state = wait_until(lambda: _ended(runner, job), 60)
    assert state.succeeded and state.result["jobId"] == JOB
    assert target.read_bytes() == data
    # one worker read the source, once: a GET that sniffs it, then one read of it all
    assert [h.get("Range") for h in faulty.seen("once.raw")] == [None, f"bytes=0-{2 * MiB - 1}"]
    stdout = (data_dir / "jobs" / JOB / "stdout").read_text().splitlines()
    assert [json.loads(line).get("ok") for line in stdout if '"ok"' in line] == [True]
    wait_until(lambda: not workers_under(data_dir), 30)
