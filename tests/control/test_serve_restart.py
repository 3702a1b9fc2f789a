"""`diskferry serve` killed with SIGKILL in the middle of an HTTP import and of an export, then
started again: the import completes without downloading its source again, the export keeps
serving through the daemon's absence, and the status is right afterwards."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from control_support import stop_workers_under, wait_until, workers_under
from daemon_support import Served, free_port, start_daemon
from vmexport_support import get_when_up, raw_url

MiB = 1 << 20
EXE = [sys.executable, "-m", "diskferry.cli.main"]


def _cli(served: Served, *args: str) -> str:
    proc = subprocess.run(
        [*EXE, *args, "--kubeconfig", str(served.kubeconfig)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _get(served: Served, kind: str, name: str) -> dict[str, Any]:
    return json.loads(_cli(served, "get", kind, name, "-o", "json"))


def _slow_disk(slow_url: str) -> str:
    return f"""\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {{name: slow}}
spec:
  dataSource: {{type: HTTP, http: {{url: "{slow_url}"}}}}
"""


EXPORTED = """\
apiVersion: diskferry.io/v1alpha1
kind: VirtualDisk
metadata: {name: blank}
spec:
  persistentVolumeClaim: {size: 8Mi}
---
apiVersion: diskferry.io/v1alpha1
kind: VirtualMachineExport
metadata: {name: ex}
spec:
  source: {apiGroup: diskferry.io, kind: VirtualDisk, name: blank}
"""


def _download(served: Served) -> tuple[int, bytes]:
    status = _get(served, "vmexport", "ex")["status"]
    secret = _get(served, "secret", status["tokenSecretRef"])
    token = base64.b64decode(secret["data"]["token"]).decode()
    external = status["links"]["external"]
    return get_when_up(raw_url(external), external["cert"], token)


@pytest.fixture
def data_dir(tmp_path: Path):
    """The daemon's data directory; whatever runs under it is stopped after the test."""
    path = tmp_path / "data"
    yield path
    try:
        wait_until(lambda: not workers_under(path), 30)  # nothing left once the export went
    finally:
        stop_workers_under(path)


def test_a_killed_daemon_loses_neither_the_import_nor_the_export(
    faulty, data_dir: Path, tmp_path: Path
) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(16 * MiB))
    slow_url = faulty.add("slow.raw", source, piece=128 * 1024, trickle=0.1)
    exported, slow = tmp_path / "exported.yaml", tmp_path / "slow.yaml"
    exported.write_text(EXPORTED)
    slow.write_text(_slow_disk(slow_url))
    log = tmp_path / "serve.log"
    options = ("--proxy-port", str(free_port()))
    first = start_daemon(data_dir, log, options=options)
    try:
        _cli(first, "apply", "-f", str(exported))
        _cli(first, "wait", "vmexport", "ex", "--for=phase=Ready", "--timeout=2m")
        links = _get(first, "vmexport", "ex")["status"]["links"]
        assert _download(first) == (200, bytes(8 * MiB))
        _cli(first, "apply", "-f", str(slow))
        wait_until(lambda: _get(first, "vd", "slow")["status"].get("progress", "0%") != "0%")
        assert _get(first, "vd", "slow")["status"]["phase"] == "Provisioning"
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()

    second = start_daemon(data_dir, log, port=first.port, options=options)
    try:
        _cli(second, "wait", "vd", "slow", "--for=phase=Ready", "--timeout=3m")
        disk = _get(second, "vd", "slow")
        claim = next(
            (data_dir / "volumes").rglob(
                f"{disk['status']['target']['persistentVolumeClaimName']}*"
            )
        )
        assert claim.read_bytes()[: 16 * MiB] == source.read_bytes()
        # not downloaded again: one GET sniffs it, then its one run is read
        ranges = [h.get("Range") for h in faulty.seen("slow.raw")]
        assert ranges == [None, f"bytes=0-{16 * MiB - 1}"]
        export = _get(second, "vmexport", "ex")
        assert export["status"]["phase"] == "Ready"
        assert export["status"]["links"] == links
        assert _download(second) == (200, bytes(8 * MiB))
        assert second.token() not in log.read_text()
    finally:
        _cli(second, "delete", "vmexport", "ex", "--wait")
        assert second.stop() == 0
