"""LocalRunner over the real import worker: progress, results, bounded logs, cancel, purge, and
workers found again by a runner made afresh, or after the process that started them died."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from control_support import wait_until

from diskferry.base import procstat
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.local import JobStartError, LocalRunner
from diskferry.control.runtime.runner.tail import LINE_CHARS, tail_lines
from diskferry.importer import ImportJob

MiB = 1 << 20


@pytest.fixture
def slow_source(faulty, tmp_path: Path) -> tuple[str, bytes]:
    """An 8 MiB disk served 128 KiB every 0.05 s, so its import runs for a few seconds."""
    data = os.urandom(8 * MiB)
    path = tmp_path / "source.raw"
    path.write_bytes(data)
    return faulty.add("slow.img", path, piece=128 * 1024, trickle=0.05), data


def _import(url: str, target: Path) -> ImportJob:
    return ImportJob(source=url, target=str(target))


def test_a_job_runs_to_its_result(nginx, images, tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    target = tmp_path / "disk.raw"
    runner.start("job-1", _import(nginx.publish(images.reference), target))
    state = wait_until(lambda: (s := runner.state("job-1")) and not s.running and s)
    assert state.succeeded and state.exit_code == 0
    assert state.result["jobId"] == "job-1"
    assert state.result["virtualSize"] == images.disk_size
    assert images.same(target, images.reference)
    record = json.loads((tmp_path / "data/jobs/job-1/state.json").read_text())
    assert record["bootId"] == procstat.boot_id()
    assert isinstance(record["port"], int) and record["exitCode"] == 0
    assert runner.job_ids() == ["job-1"]


def test_start_twice_runs_once_and_progress_is_read(slow_source, tmp_path: Path) -> None:
    url, data = slow_source
    runner = LocalRunner(tmp_path / "data")
    runner.start("job-2", _import(url, tmp_path / "disk.raw"))
    pid = json.loads((tmp_path / "data/jobs/job-2/state.json").read_text())["pid"]
    runner.start("job-2", _import(url, tmp_path / "other.raw"))
    assert json.loads((tmp_path / "data/jobs/job-2/state.json").read_text())["pid"] == pid
    progress = wait_until(
        lambda: (s := runner.state("job-2")).progress and s.progress["bytesDone"] and s.progress
    )
    assert progress["jobId"] == "job-2"
    assert progress["bytesTotal"] == len(data)
    assert os.getpgid(pid) == pid and os.getsid(pid) == pid
    wait_until(lambda: runner.state("job-2").succeeded)
    assert (tmp_path / "disk.raw").read_bytes() == data
    assert not (tmp_path / "other.raw").exists()


def test_cancel_stops_the_worker_and_purge_removes_its_files(slow_source, images, tmp_path):
    url, _ = slow_source
    runner = LocalRunner(tmp_path / "data")
    target = tmp_path / "out" / "disk.raw"
    target.parent.mkdir()
    runner.start("job-3", _import(url, target))
    wait_until(lambda: (s := runner.state("job-3")).progress and s.progress["bytesDone"] > 0)
    assert runner.purge("job-3", keep_scratch=False) is False  # running: cancelled instead
    state = wait_until(lambda: (s := runner.state("job-3")) and not s.running and s)
    assert state.result["reason"] == "Cancelled" and state.exit_code == 1
    assert any("cancelled" in line for line in runner.log_tail("job-3"))
    assert runner.purge("job-3", keep_scratch=False) is True
    assert runner.state("job-3") is None
    assert not (tmp_path / "data/jobs/job-3").exists()
    assert not target.exists() and images.leftovers(target.parent) == []


def test_a_purged_job_keeps_its_log_tail_until_forgotten(nginx, images, tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    runner.start("job-9", _import(nginx.publish(images.reference), tmp_path / "d.raw"))
    wait_until(lambda: (s := runner.state("job-9")) and not s.running)
    logged = runner.log_tail("job-9")
    assert logged
    assert runner.purge("job-9", keep_scratch=False)
    assert not (tmp_path / "data/jobs/job-9").exists()
    assert runner.log_tail("job-9") == logged
    assert runner.forget("job-9")
    assert runner.log_tail("job-9") == []
    assert not (tmp_path / "data/jobs/logs/job-9.log").exists()


def test_a_failed_job_is_kept_under_failed(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    runner.start("job-4", _import(str(tmp_path / "missing.raw"), tmp_path / "t.raw"))
    state = wait_until(lambda: (s := runner.state("job-4")) and not s.running and s)
    assert state.failed and state.result["reason"] == "SourceUnavailable"
    assert runner.purge("job-4", keep_scratch=True)
    kept = tmp_path / "data/jobs/failed/job-4"
    assert (kept / "stderr").exists() and not (tmp_path / "data/jobs/job-4").exists()
    assert runner.state("job-4").result["reason"] == "SourceUnavailable"
    assert runner.job_ids() == []
    runner.start("job-4", _import(str(tmp_path / "missing.raw"), tmp_path / "t.raw"))
    assert not (tmp_path / "data/jobs/job-4").exists()  # a kept job is not started again
    assert runner.purge("job-4", keep_scratch=False)
    assert not kept.exists() and runner.state("job-4") is None


def test_a_runner_made_afresh_reattaches_to_a_running_worker(slow_source, tmp_path: Path):
    url, data = slow_source
    LocalRunner(tmp_path / "data").start("job-5", _import(url, tmp_path / "disk.raw"))
    again = LocalRunner(tmp_path / "data")
    progress = wait_until(lambda: (s := again.state("job-5")).running and s.progress)
    assert progress["jobId"] == "job-5"
    state = wait_until(lambda: (s := again.state("job-5")) and not s.running and s)
    assert state.succeeded and state.result["virtualSize"] == len(data)


_DAEMON = """
import sys, time
from pathlib import Path
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.importer import ImportJob
LocalRunner(Path(sys.argv[1])).start("job-6", ImportJob(source=sys.argv[2], target=sys.argv[3]))
print("started", flush=True)
time.sleep(600)
"""


def test_a_killed_starter_leaves_the_worker_running_and_its_result_is_read(
    slow_source, tmp_path: Path
) -> None:
    url, data = slow_source
    target = tmp_path / "disk.raw"
    daemon = subprocess.Popen(
        [sys.executable, "-c", _DAEMON, str(tmp_path / "data"), url, str(target)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert daemon.stdout.readline().strip() == "started"
    daemon.send_signal(signal.SIGKILL)
    daemon.wait()
    runner = LocalRunner(tmp_path / "data")
    assert runner.state("job-6").running
    pid = json.loads((tmp_path / "data/jobs/job-6/state.json").read_text())["pid"]
    wait_until(lambda: not procstat.is_same(pid, procstat.read(pid).start_time), timeout=60)
    state = runner.state("job-6")  # it ended while no runner looked
    assert state.succeeded and state.result["jobId"] == "job-6"
    assert target.read_bytes() == data


def test_a_reused_pid_is_not_taken_for_the_worker(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    runner.start("job-7", _import(str(tmp_path / "missing.raw"), tmp_path / "t.raw"))
    wait_until(lambda: not runner.state("job-7").running)
    state_file = tmp_path / "data/jobs/job-7/state.json"
    record = json.loads(state_file.read_text())
    # this very process, alive, with the pid recorded but another start time or boot
    me = procstat.read(os.getpid())
    for change in ({"startTime": me.start_time + 1}, {"bootId": "another-boot"}):
        state_file.write_text(json.dumps({**record, "pid": os.getpid(), **change}))
        again = LocalRunner(tmp_path / "data")
        assert not again.state("job-7").running
        again.cancel("job-7")  # must not signal this process's group
    # a worker that ended before its start time could be read has none recorded
    ended = subprocess.Popen(["true"])
    ended.wait()
    state_file.write_text(json.dumps({**record, "pid": ended.pid, "startTime": None}))
    assert not LocalRunner(tmp_path / "data").state("job-7").running


def test_bad_ids_and_file_names_are_refused(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    for job_id in ("../x", "failed", ""):
        with pytest.raises(JobStartError):
            runner.start(job_id, _import("x", tmp_path / "t.raw"))
    for name in ("../x", "state.json", "a/b"):
        with pytest.raises(JobStartError):
            runner.start("ok", _import("x", tmp_path / "t.raw"), [JobFile(name, b"")])


def test_files_are_written_beside_the_job(faulty, tmp_path: Path) -> None:
    path = tmp_path / "src.raw"
    path.write_bytes(b"x" * 65536)
    url = faulty.add("h.img", path)
    runner = LocalRunner(tmp_path / "data")
    job = ImportJob(source=url, target=str(tmp_path / "t.raw"), headers_file="headers")
    runner.start("job-8", job, [JobFile("headers", b"X-Test: yes\n")])
    wait_until(lambda: runner.state("job-8").succeeded)
    assert faulty.seen("h.img")[0]["X-Test"] == "yes"
    assert (tmp_path / "data/jobs/job-8/headers").stat().st_mode & 0o777 == 0o600


def test_the_log_tail_is_bounded_whatever_was_printed(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    with open(log, "wb") as f:
        f.truncate(1 << 30)  # a 1 GiB log, sparse, read only at its end
        f.seek(0, os.SEEK_END)
        f.write(b"".join(b"line %d\n" % n for n in range(1000)))
        f.write(b"y" * (3 * LINE_CHARS) + b"\n")
    lines = tail_lines(log, 200)
    assert len(lines) == 200
    assert lines[0] == "line 801" and lines[-2] == "line 999"
    assert lines[-1] == "y" * LINE_CHARS
    assert tail_lines(tmp_path / "none", 5) == []
    with open(log, "ab") as f:
        f.write(b"z" * (2 << 20))  # one unfinished 2 MiB line: what is read stays bounded
    assert tail_lines(log, 200) == []


def test_log_tail_of_a_job_that_printed_much(tmp_path: Path) -> None:
    runner = LocalRunner(tmp_path / "data")
    runner.start("job-9", _import(str(tmp_path / "missing.raw"), tmp_path / "t.raw"))
    wait_until(lambda: not runner.state("job-9").running)
    with open(tmp_path / "data/jobs/job-9/stderr", "ab") as f:
        f.write(b"".join(b"noise %d\n" % n for n in range(100_000)))
    tail = runner.log_tail("job-9")
    assert len(tail) == 200 and tail[-1] == "noise 99999"
    assert runner.log_tail("job-9", 3) == ["noise 99997", "noise 99998", "noise 99999"]


def test_a_worker_killed_outright_has_no_result(slow_source, tmp_path: Path) -> None:
    url, _ = slow_source
    runner = LocalRunner(tmp_path / "data")
    runner.start("job-10", _import(url, tmp_path / "disk.raw"))
    wait_until(lambda: runner.state("job-10").progress)
    pid = json.loads((tmp_path / "data/jobs/job-10/state.json").read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    state = wait_until(lambda: (s := runner.state("job-10")) and not s.running and s)
    assert state.result is None and state.failed and state.exit_code == -signal.SIGKILL
    assert LocalRunner(tmp_path / "data").state("job-10").exit_code == -signal.SIGKILL
