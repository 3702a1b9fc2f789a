"""The import worker: job file, /progress and /metrics while it runs, result line, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DATA = os.urandom(1 << 20) * 12


class _Trickle(BaseHTTPRequestHandler):
    """Serves DATA slowly, so the worker is still running while the test looks at it."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(DATA)))
        self.end_headers()
        step = 256 * 1024
        try:
            for pos in range(0, len(DATA), step):
                self.wfile.write(DATA[pos : pos + step])
                time.sleep(self.server.delay)  # type: ignore[attr-defined]
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def trickle_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    server.delay = 0.05  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _start(job: dict, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    proc = subprocess.Popen(
        [sys.executable, "-m", "diskferry.importer.worker", str(job_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = json.loads(proc.stdout.readline())
    return proc, first["port"]


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return resp.read()


def _wait_for_bytes(port: int) -> dict:
    for _ in range(200):
        state = json.loads(_get(port, "/progress"))
        if state["bytesDone"] > 0:
            return state
        time.sleep(0.05)
    raise AssertionError("the worker reported no progress")


def test_worker_reports_progress_and_result(trickle_server, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{trickle_server.server_address[1]}/disk.img"
    target = tmp_path / "out.img"
    proc, port = _start({"source": url, "target": str(target)}, tmp_path)
    state = _wait_for_bytes(port)
    assert state["bytesTotal"] == len(DATA)
    assert 0 < state["percent"] <= 100
    assert {"averageSpeed", "currentSpeed", "phase"} <= set(state)
    metrics = _get(port, "/metrics").decode()
    assert 'diskferry_job_bytes_total{job="import"} ' + str(len(DATA)) in metrics
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["ok"] is True
    assert result["virtualSize"] == len(DATA)
    assert target.read_bytes() == DATA


def test_sigterm_cancels_and_leaves_nothing(trickle_server, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{trickle_server.server_address[1]}/disk.img"
    target = tmp_path / "out.img"
    target.write_bytes(b"the old contents")
    proc, port = _start({"source": url, "target": str(target)}, tmp_path)
    _wait_for_bytes(port)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"ok": False, "reason": "Cancelled", "message": "cancelled"}
    assert target.read_bytes() == b"the old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.json", "out.img"]


def test_bad_job_file_exits_2(tmp_path: Path) -> None:
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({"source": "x", "target": "y", "format": "vmdk"}))
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.importer.worker", str(job_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is False and result["reason"] == "BadJob"
    assert "format" in result["message"]


def test_failure_reason_in_result(tmp_path: Path) -> None:
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({"source": str(tmp_path / "missing"), "target": "t.img"}))
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.importer.worker", str(job_file)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["reason"] == "SourceUnavailable"
    assert "missing" in result["message"]
