"""The import worker: /progress and /metrics while it runs, the result line, the job id on the
target, SIGTERM, and failures that end with a JSON result rather than a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from worker_support import job_file, run, start

from diskferry.disk.prime import recorded_job

MiB = 1 << 20


@pytest.fixture
def trickling(faulty, tmp_path: Path) -> tuple[str, bytes]:
    """A 12 MiB source served 256 KiB at a time, so the worker is still running when looked at."""
    data = os.urandom(12 * MiB)
    source = tmp_path / "source.raw"
    source.write_bytes(data)
    return faulty.add("disk.img", source, piece=256 * 1024, trickle=0.05), data


def test_progress_metrics_and_result_carry_the_job(trickling, tmp_path: Path) -> None:
    url, data = trickling
    target = tmp_path / "out.img"
    job = job_file(tmp_path, {"jobId": "import-1", "source": url, "target": str(target)})
    worker = start("import", job)
    state = worker.wait_for(lambda s: s["bytesDone"] > 0)
    assert (state["jobId"], state["kind"], state["phase"]) == ("import-1", "import", "Importing")
    assert state["bytesTotal"] == len(data)
    assert 0 < state["percent"] <= 100
    assert {"averageSpeed", "currentSpeed", "eta", "events", "details"} <= set(state)
    metrics = worker.get("/metrics").decode()
    assert f'diskferry_job_bytes_total{{job="import",job_id="import-1"}} {len(data)}' in metrics
    finished = worker.finish()
    assert finished.code == 0, finished.stderr
    result = finished.result
    assert (result["ok"], result["jobId"], result["virtualSize"]) == (True, "import-1", len(data))
    assert target.read_bytes() == data
    assert recorded_job(str(target)) == "import-1"


def test_sigterm_cancels_and_leaves_nothing(trickling, images, tmp_path: Path) -> None:
    url, _ = trickling
    target = tmp_path / "out.img"
    target.write_bytes(b"the old contents")
    job = job_file(
        tmp_path, {"jobId": "import-2", "source": url, "target": str(target), "force": True}
    )
    worker = start("import", job)
    worker.wait_for(lambda s: s["bytesDone"] > 0)
    finished = worker.finish(signal.SIGTERM)
    assert finished.code == 1
    assert finished.result == {
        "ok": False,
        "reason": "Cancelled",
        "message": "cancelled",
        "jobId": "import-2",
    }
    finished.assert_one_log_line_of_failure()
    assert target.read_bytes() == b"the old contents"
    assert recorded_job(str(target)) is None
    assert images.leftovers(tmp_path) == []


def test_a_failure_is_a_result_with_its_reason(tmp_path: Path) -> None:
    job = job_file(tmp_path, {"source": str(tmp_path / "missing"), "target": "t.img"})
    finished = run("import", job)
    assert finished.code == 1
    assert finished.result["reason"] == "SourceUnavailable"
    assert "missing" in finished.result["message"]
    finished.assert_one_log_line_of_failure()


def test_an_unreadable_source_ends_with_a_result_not_a_traceback(tmp_path: Path) -> None:
    job = job_file(tmp_path, {"jobId": "j", "source": "/proc/self/mem", "target": "t.img"})
    finished = run("import", job)
    assert finished.code == 1
    result = finished.result
    assert (result["ok"], result["reason"], result["jobId"]) == (False, "SourceUnavailable", "j")
    assert result["message"] == "cannot read /proc/self/mem at byte 0: Input/output error"
    finished.assert_one_log_line_of_failure()
    assert not (tmp_path / "t.img").exists()


def test_an_nbd_export_imports_through_the_worker(tmp_path: Path) -> None:
    data = os.urandom(2 * MiB)
    source = tmp_path / "source.raw"
    with open(source, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(4 * MiB)
        f.write(data)
    sock = tmp_path / "src.sock"
    server = subprocess.Popen(
        ["qemu-nbd", "--read-only", "--persistent", f"--socket={sock}", "-f", "raw", str(source)]
    )
    try:
        while not sock.exists():
            assert server.poll() is None
            time.sleep(0.02)
        target = tmp_path / "out.img"
        url = f"nbd+unix:///?socket={sock}"
        job = {"jobId": "import-nbd", "source": url, "target": str(target)}
        finished = run("import", job_file(tmp_path, job))
    finally:
        server.kill()
        server.wait()
    assert finished.code == 0, finished.stderr
    assert (finished.result["ok"], finished.result["bytesWritten"]) == (True, len(data))
    assert target.read_bytes() == source.read_bytes()
    assert recorded_job(str(target)) == "import-nbd"


def test_a_job_whose_target_it_committed_before_is_done_without_its_source(
    tmp_path: Path,
) -> None:
    target = tmp_path / "out.img"
    data = os.urandom(MiB)
    source = tmp_path / "source.raw"
    source.write_bytes(data)
    job = {"jobId": "vd-9", "source": str(source), "target": str(target), "force": True}
    assert run("import", job_file(tmp_path, job)).code == 0
    source.unlink()  # run again, the job must not need it
    again = run("import", job_file(tmp_path, job))
    assert again.code == 0, again.stderr
    assert (again.result["ok"], again.result["virtualSize"]) == (True, MiB)
    assert again.result["bytesRead"] == 0
    assert target.read_bytes() == data
    other = run("import", job_file(tmp_path, {**job, "jobId": "vd-10"}))
    assert (other.code, other.result["reason"]) == (1, "SourceUnavailable")
