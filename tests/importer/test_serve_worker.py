"""The serve worker (`python -m diskferry.importer.worker`, kind serve): a volume served read-only
over NBD with TLS, where it listens in its /progress, until SIGTERM; an import reads it over
nbds:// with the client's certificate of the pair, and a client without one is refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from diskferry.serving import issue_pair

MiB = 1 << 20
NAME = "clone-source"


def _disk(path: Path) -> Path:
    with open(path, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(3 * MiB)
        f.write(os.urandom(MiB + 512))
    return path


def _progress(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=5) as answer:
        return json.loads(answer.read())


def _serving(proc: subprocess.Popen[str], port: int) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        details = _progress(port).get("details") or {}
        if details.get("listenPort"):
            return details
        time.sleep(0.05)
    raise AssertionError("the serve worker never listened")


def test_a_served_volume_is_cloned_over_tls_and_the_worker_ends_on_sigterm(
    tmp_path: Path, diskferry
) -> None:
    disk = _disk(tmp_path / "source.raw")
    pair = issue_pair(NAME)
    served, reader, stranger = (tmp_path / n for n in ("served", "reader", "stranger"))
    for folder, files in [
        (served, {"server-cert.pem": pair.server_cert, "server-key.pem": pair.server_key}),
        (reader, {"client-cert.pem": pair.client_cert, "client-key.pem": pair.client_key}),
        (stranger, {}),
    ]:
        folder.mkdir()
        for name, data in {"ca-cert.pem": pair.ca, **files}.items():
            (folder / name).write_bytes(data)
    job = {"kind": "serve", "jobId": "serve-1", "source": str(disk), "tlsCertificates": "."}
    (served / "job.json").write_text(json.dumps(job))
    proc = subprocess.Popen(
        [sys.executable, "-m", "diskferry.importer.worker", "job.json"],
        cwd=served,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert "port" in first, first
        port = first["port"]
        details = _serving(proc, port)
        assert _progress(port)["phase"] == "Serving"
        host = f"{details['listenAddress']}:{details['listenPort']}"
        url = f"nbds://{host}/disk?tls-hostname={NAME}&tls-certificates="
        target = tmp_path / "clone.raw"
        done = diskferry("import", url + str(reader), target, "--no-progress")
        assert done.code == 0, done.stderr
        assert target.read_bytes() == disk.read_bytes()
        refused = diskferry("import", url + str(stranger), tmp_path / "no.raw", "--no-progress")
        assert refused.code == 1 and not (tmp_path / "no.raw").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    result = json.loads(out.splitlines()[-1])
    assert result["ok"] and result["listenPort"] == details["listenPort"]
    assert disk.stat().st_size == 16 * MiB
