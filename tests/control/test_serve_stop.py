"""`diskferry serve --stop`: the daemon of a data directory and every worker it started end for
good, and are waited for; without a daemon, the workers one left end all the same."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_support import stop_workers_under, wait_until, workers_under
from daemon_support import free_port, start_daemon
from reconcile_support import http_source

from diskferry.base import procstat
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.importer import ImportJob
from diskferry.worker import WorkerJob

MiB = 1 << 20


@pytest.fixture
def data_dir(faulty, tmp_path: Path) -> Iterator[Path]:
    """A data directory; what a failed test left running there is killed at its end, before
    `faulty` stops (which waits for the connections it serves)."""
    path = tmp_path / "data"
    path.mkdir()
    yield path
    stop_workers_under(path)


@pytest.fixture
def slow_url(faulty, tmp_path: Path) -> str:
    """A 16 MiB disk served 64 KiB every 0.05 s: its import runs well past any test's look."""
    source = tmp_path / "source.raw"
    source.write_bytes(os.urandom(16 * MiB))
    return faulty.add("slow.raw", source, piece=64 * 1024, trickle=0.05)


def _stop(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "diskferry.cli.main",
            "serve",
            "--stop",
            "--data-dir",
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _disk(name: str, source: dict) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualDisk",
        "metadata": {"name": name},
        "spec": {"persistentVolumeClaim": {"size": "64Mi"}, "dataSource": source},
    }


def _serving_jobs(data_dir: Path) -> list[str]:
    """The jobs whose workers run and have said their port (they take SIGTERM as a cancel)."""
    runner = LocalRunner(data_dir)
    return [j for j in runner.job_ids() if (s := runner.state(j)) and s.running and s.port]


def test_serve_stop_ends_the_daemon_and_every_worker(data_dir, slow_url, tmp_path) -> None:
    objects = ObjectService(data_dir / "state.db", REGISTRY)
    slow = objects.create(VIRTUAL_DISKS, "default", _disk("slow", http_source(slow_url)))[0]
    objects.create(VIRTUAL_DISKS, "default", _disk("upload", {"type": "Upload"}))
    objects.close()
    served = start_daemon(
        data_dir, tmp_path / "serve.log", options=("--proxy-port", str(free_port()))
    )
    try:
        # an import, and an upload server that waits for its upload (and the proxy, if it
        # routes the upload already)
        running = wait_until(lambda: len(jobs := _serving_jobs(data_dir)) >= 2 and jobs, 60)
        stopped = _stop(data_dir)
    finally:
        if served.process.poll() is None:
            served.process.kill()
    assert stopped.returncode == 0, stopped.stderr
    assert f"the daemon (pid {served.process.pid})" in stopped.stderr
    assert served.process.poll() == 0
    assert workers_under(data_dir) == []
    runner = LocalRunner(data_dir)
    states = {job_id: runner.state(job_id) for job_id in running}
    # each ended as on SIGTERM, with a result: the import's says it was cancelled
    assert all(s is not None and not s.running and s.result for s in states.values()), states
    assert states[f"vd-{slow['metadata']['uid']}"].result["reason"] == "Cancelled"


def test_serve_stop_without_a_daemon_ends_the_workers_left(data_dir, slow_url, tmp_path) -> None:
    runner = LocalRunner(data_dir)
    runner.start("job-1", ImportJob(source=slow_url, target=str(tmp_path / "disk.raw")))
    wait_until(lambda: (s := runner.state("job-1")).progress and s.progress["bytesDone"] > 0)
    # a record left by a daemon killed outright, naming a pid now another process's
    me = procstat.read(os.getpid())
    assert me is not None
    stale = {"pid": os.getpid(), "startTime": me.start_time + 1, "bootId": procstat.boot_id()}
    (data_dir / "serve.json").write_text(json.dumps(stale))

    stopped = _stop(data_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stderr == f"diskferry: stopped 1 worker of {data_dir}: job-1\n"
    assert workers_under(data_dir) == []
    state = runner.state("job-1")
    assert not state.running and state.result["reason"] == "Cancelled"
    assert not (tmp_path / "disk.raw").exists()


class DeafJob(WorkerJob):
    """A job of the module `deaf`, which a test gives beside the job file."""

    WORKER = "deaf"


def test_a_worker_deaf_to_sigterm_is_killed_at_the_timeout(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    # a module beside the job file, which the worker's `python -m` finds first
    deaf = b"import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)\n"
    runner.start("deaf", DeafJob(), [JobFile("deaf.py", deaf)])
    runner.start("quick", ImportJob(source=str(tmp_path / "none"), target="t"))
    wait_until(lambda: not runner.state("quick").running)
    assert runner.state("deaf").running

    assert runner.stop_all(timeout=1) == ["deaf"]
    state = runner.state("deaf")
    assert not state.running and state.exit_code == -signal.SIGKILL
    assert workers_under(tmp_path / "data") == []


def test_serve_stop_refuses_a_directory_that_is_not_there(tmp_path: Path) -> None:
    stopped = _stop(tmp_path / "nothing")
    assert stopped.returncode == 1
    assert stopped.stderr.startswith("diskferry: error: ") and "nothing" in stopped.stderr
    assert not (tmp_path / "nothing").exists()
