"""The upload worker: /progress while it waits, the upload through its server, the result line."""

from __future__ import annotations

import subprocess
from pathlib import Path

from worker_support import job_file, run, start

from diskferry.serving.certs import create_ca

TOKEN = "worker-upload-token"


def test_an_upload_job_waits_takes_one_upload_and_ends(tmp_path: Path, images) -> None:
    create_ca(tmp_path / "ca")
    (tmp_path / "token").write_text(TOKEN)
    target = tmp_path / "disk.qcow2"
    job = {
        "kind": "upload",
        "jobId": "upload-1",
        "target": str(target),
        "format": "qcow2",
        "tokenFile": str(tmp_path / "token"),
        "certDir": str(tmp_path / "ca"),
        "sans": ["127.0.0.1"],
        "listenAddress": "127.0.0.1",
        "listenPort": 0,
    }
    worker = start("upload", job_file(tmp_path, job))
    state = worker.wait_for(lambda s: s["phase"] == "WaitingForUpload")
    port = state["details"]["listenPort"]
    assert state["kind"] == "upload"
    assert TOKEN not in str(state)
    auth = ["-H", f"Authorization: Bearer {TOKEN}"]
    send = ["--data-binary", f"@{images.get('vdi')}", f"https://127.0.0.1:{port}/v1beta1/upload"]
    curl = subprocess.run(
        ["curl", "-sS", "-f", "--cacert", str(tmp_path / "ca" / "ca.crt"), *auth, *send],
        capture_output=True,
        text=True,
        check=False,
    )
    assert curl.returncode == 0, curl.stderr
    finished = worker.finish()
    assert finished.code == 0, finished.stderr
    result = finished.result
    assert (result["ok"], result["jobId"], result["listenPort"]) == (True, "upload-1", port)
    assert (result["uploaded"]["sourceFormat"], result["uploaded"]["format"]) == ("vdi", "qcow2")
    assert images.same(target, images.reference)


def test_an_upload_job_whose_target_it_committed_before_serves_nothing(tmp_path: Path) -> None:
    create_ca(tmp_path / "ca")
    (tmp_path / "token").write_text(TOKEN)
    target = tmp_path / "disk.img"
    blank = {"kind": "blank", "jobId": "vd-u", "target": str(target), "size": 1 << 20}
    assert run("upload", job_file(tmp_path, blank)).code == 0  # committed with the id vd-u
    job = {
        "kind": "upload",
        "jobId": "vd-u",
        "target": str(target),
        "tokenFile": str(tmp_path / "token"),
        "certDir": str(tmp_path / "ca"),
        "listenAddress": "127.0.0.1",
        "listenPort": 0,
    }
    finished = run("upload", job_file(tmp_path, job), timeout=30)
    assert finished.code == 0, finished.stderr
    assert finished.result["uploaded"]["virtualSize"] == 1 << 20
    assert finished.result["uploaded"]["bytesRead"] == 0
    assert "upload server listening" not in finished.stderr
