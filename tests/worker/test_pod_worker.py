"""A worker in a Pod: its status server listens on the address its Pod gives it (the Pod's IP),
and so does the server of a job that asks for every address; its result goes to the file its
Pod names (the termination message) as well as to stdout, bounded as Kubernetes bounds a
termination message."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from worker_support import free_loopback, job_file, run, start

from diskferry.serving.certs import create_ca
from diskferry.worker.pod import ADDRESS_ENV, RESULT_FILE_ENV, RESULT_LIMIT, RESULT_TOO_LARGE

MiB = 1 << 20


def _waiting(status: str) -> dict:
    """The /progress at `status` once the upload server waits for an upload."""
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(status, timeout=5) as answer:
            state = json.loads(answer.read())
        if state["phase"] == "WaitingForUpload" or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def test_the_result_is_written_to_the_file_the_pod_names(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    job = {"kind": "blank", "jobId": "vd-7", "target": str(tmp_path / "blank.img"), "size": MiB}
    finished = run(
        "import", job_file(tmp_path, job), env={**os.environ, RESULT_FILE_ENV: str(message)}
    )
    assert finished.code == 0, finished.stderr
    assert json.loads(message.read_text()) == finished.result
    assert finished.result["ok"] is True


def test_a_failed_job_s_result_is_written_there_too(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    job = {"kind": "grow", "jobId": "vd-8", "target": str(tmp_path / "missing.img"), "size": MiB}
    finished = run(
        "import", job_file(tmp_path, job), env={**os.environ, RESULT_FILE_ENV: str(message)}
    )
    assert finished.code == 1
    written = json.loads(message.read_text())
    assert written == finished.result and written["ok"] is False


def test_a_result_too_long_for_a_termination_message_says_so_there(tmp_path: Path) -> None:
    message = tmp_path / "termination-log"
    long_id = "j" * 200
    deep = tmp_path.joinpath(*["d" * 200] * 20)  # a failure that names this path runs long
    job = {"kind": "grow", "jobId": long_id, "target": str(deep / "disk.img"), "size": 1}
    env = {**os.environ, RESULT_FILE_ENV: str(message)}
    finished = run("import", job_file(tmp_path, job), env=env)
    assert len(json.dumps(finished.result)) > RESULT_LIMIT  # stdout has it whole
    written = message.read_bytes()
    assert len(written) <= RESULT_LIMIT
    result = json.loads(written)
    assert (result["ok"], result["reason"], result["jobId"]) == (False, RESULT_TOO_LARGE, long_id)
    assert result["message"].startswith("the job's result")


def test_the_status_server_listens_on_the_address_the_pod_gives(tmp_path: Path) -> None:
    address = free_loopback()
    with socket.socket() as silent:  # a source that takes the connection and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/disk.raw"
        job = {"jobId": "vd-9", "source": url, "target": str(tmp_path / "t.img"), "timeout": 3}
        running = start("import", job_file(tmp_path, job), env={**os.environ, ADDRESS_ENV: address})
        try:
            status = f"http://{address}:{running.port}/progress"
            with urllib.request.urlopen(status, timeout=5) as answer:
                assert json.loads(answer.read())["jobId"] == "vd-9"
        finally:
            running.finish(signal.SIGTERM)


def test_a_server_asked_for_every_address_listens_on_the_pod_s(tmp_path: Path) -> None:
    address = free_loopback()
    create_ca(tmp_path / "ca")
    (tmp_path / "token").write_text("pod-upload-token")
    job = {
        "kind": "upload",
        "jobId": "vd-10",
        "target": str(tmp_path / "disk.img"),
        "tokenFile": str(tmp_path / "token"),
        "certDir": str(tmp_path / "ca"),
        "listenAddress": "0.0.0.0",
        "listenPort": 0,
    }
    running = start("import", job_file(tmp_path, job), env={**os.environ, ADDRESS_ENV: address})
    try:
        details = _waiting(f"http://{address}:{running.port}/progress")["details"]
        assert details["listenAddress"] == address
        with socket.create_connection((address, details["listenPort"]), timeout=5):
            pass
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", details["listenPort"]), timeout=5)
    finally:
        running.finish(signal.SIGTERM)
