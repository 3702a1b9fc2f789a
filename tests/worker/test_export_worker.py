"""The export worker: an export server or the proxy as a job, its port and URLs in /progress,
and a result that says how it ended (stopped by SIGTERM, or expired at its TTL)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from worker_support import free_loopback, job_file, run, start

from diskferry.serving.certs import create_ca
from diskferry.worker.pod import ADDRESS_ENV

TOKEN = "worker-export-token"


@pytest.fixture
def export_job(tmp_path: Path) -> dict[str, Any]:
    """An export job of one 4 MiB disk, listening on a port the server picks."""
    create_ca(tmp_path / "ca")
    (tmp_path / "token").write_text(TOKEN + "\n")
    disk = tmp_path / "disk.img"
    disk.write_bytes(os.urandom(4 << 20))
    return {
        "name": "vm1",
        "volumes": [{"name": "disk", "path": str(disk)}],
        "tokenFile": str(tmp_path / "token"),
        "certDir": str(tmp_path / "ca"),
        "sans": ["127.0.0.1"],
        "listenAddress": "127.0.0.1",
        "listenPort": 0,
    }


def _curl(ca: Path, url: str, *headers: str) -> subprocess.CompletedProcess[bytes]:
    args = ["curl", "-sS", "--max-time", "30", "--cacert", str(ca / "ca.crt")]
    for header in headers:
        args += ["-H", header]
    return subprocess.run([*args, url], capture_output=True, timeout=60)


def test_an_export_job_serves_until_sigterm(tmp_path: Path, export_job: dict[str, Any]) -> None:
    links = {"internalUrl": "https://in.example", "externalUrl": "https://out.example"}
    job = {**export_job, "jobId": "e-1", "links": {**links, "file": str(tmp_path / "links.json")}}
    worker = start("export", job_file(tmp_path, job))
    state = worker.wait_for(lambda s: s["phase"] == "Serving")
    details = state["details"]
    port = details["listenPort"]
    assert details == {
        "listenAddress": "127.0.0.1",
        "listenPort": port,
        "url": f"https://127.0.0.1:{port}",
        **links,
    }
    assert [e["reason"] for e in state["events"]] == ["Listening"]
    assert state["events"][0]["type"] == "Normal"
    got = _curl(
        tmp_path / "ca",
        f"https://127.0.0.1:{port}/volumes/disk/disk.img",
        f"x-kubevirt-export-token: {TOKEN}",
    )
    assert got.stdout == (tmp_path / "disk.img").read_bytes(), got.stderr
    assert json.loads((tmp_path / "links.json").read_text())["external"]["volumes"]
    finished = worker.finish(signal.SIGTERM)
    assert finished.code == 0, finished.stderr
    assert finished.result == {
        "ok": True,
        "jobId": "e-1",
        "name": "vm1",
        "ended": "stopped",
        "listenPort": port,
        "transfersCut": False,
    }


def test_an_export_job_ends_at_its_ttl(tmp_path: Path, export_job: dict[str, Any]) -> None:
    finished = run("export", job_file(tmp_path, {**export_job, "ttl": 0.5}))
    assert finished.code == 0, finished.stderr
    assert (finished.result["ok"], finished.result["ended"]) == (True, "expired")


def test_an_export_job_that_cannot_start(tmp_path: Path, export_job: dict[str, Any]) -> None:
    job = {**export_job, "tokenFile": str(tmp_path / "no-token")}
    finished = run("export", job_file(tmp_path, job))
    assert finished.code == 1
    assert finished.result["reason"] == "ExportFailed"
    assert "no-token" in finished.result["message"]
    finished.assert_one_log_line_of_failure()


def test_a_proxy_job(tmp_path: Path) -> None:
    create_ca(tmp_path / "ca")
    routes = tmp_path / "routes.yaml"
    routes.write_text(yaml.safe_dump({"exports": []}))
    job = {
        "kind": "proxy",
        "routes": str(routes),
        "certDir": str(tmp_path / "ca"),
        "sans": ["127.0.0.1"],
        "listenAddress": "127.0.0.1",
        "listenPort": 0,
    }
    worker = start("export", job_file(tmp_path, job))
    port = worker.wait_for(lambda s: s["phase"] == "Serving")["details"]["listenPort"]
    prefix = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports"
    got = _curl(tmp_path / "ca", f"https://127.0.0.1:{port}{prefix}/vm9/volumes/d/disk.img")
    assert json.loads(got.stdout)["reason"] == "UnknownExport"
    finished = worker.finish(signal.SIGTERM)
    assert finished.code == 0, finished.stderr
    assert (finished.result["ended"], finished.result["listenPort"]) == ("stopped", port)


def test_an_export_server_in_a_pod_listens_on_the_pod_s_address(
    tmp_path: Path, export_job: dict[str, Any]
) -> None:
    address = free_loopback()
    job = {**export_job, "jobId": "e-pod", "sans": [address], "listenAddress": "0.0.0.0"}
    worker = start("export", job_file(tmp_path, job), env={**os.environ, ADDRESS_ENV: address})
    worker.address = address
    try:
        details = worker.wait_for(lambda s: s["phase"] == "Serving")["details"]
        assert details["listenAddress"] == address
        url = f"https://{address}:{details['listenPort']}/volumes/disk/disk.img"
        got = _curl(tmp_path / "ca", url, f"x-kubevirt-export-token: {TOKEN}")
        assert got.stdout == (tmp_path / "disk.img").read_bytes(), got.stderr
    finally:
        assert worker.finish(signal.SIGTERM).code == 0
