"""`diskferry demo` end to end: import, export, backup and restore, each verified."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from diskferry.cli import demo_cmd


def test_demo_runs_every_step_and_verifies_it(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", "demo", "--dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert any("equals the sample" in ln for ln in lines)
    assert any("downloaded through the proxy" in ln and "equal" in ln for ln in lines)
    assert any("backup 1: full" in ln for ln in lines)
    assert any("backup 2: incremental" in ln and "read 1048576 bytes" in ln for ln in lines)
    assert sum("qemu-img compare: equal" in ln and "restored" in ln for ln in lines) == 2
    work = tmp_path / "d"
    downloaded = work / "downloaded.img"
    assert (work / "restored-1.img").read_bytes() == downloaded.read_bytes()
    assert (work / "restored-2.img").read_bytes() == (work / "imported.img").read_bytes()
    assert downloaded.read_bytes() != (work / "imported.img").read_bytes()
    assert downloaded.stat().st_blocks * 512 < downloaded.stat().st_size // 2


def test_a_demo_command_that_hangs_is_a_demo_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_cmd, "_STEP_SECONDS", 1)
    with pytest.raises(demo_cmd.DemoError, match="a sleeper did not finish within 1 s"):
        demo_cmd._step([sys.executable, "-c", "import time; time.sleep(60)"], "a sleeper")


def test_a_server_that_never_prints_its_port_is_a_demo_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(demo_cmd, "_STEP_SECONDS", 2)
    routes = tmp_path / "routes.yaml"
    os.mkfifo(routes)  # reading it waits for a writer that never comes
    serve = ["proxy", "serve", "--routes", str(routes), "--cert-dir", str(tmp_path)]
    with (
        pytest.raises(demo_cmd.DemoError, match="proxy serve did not start"),
        demo_cmd._server(serve, tmp_path / "proxy.log"),
    ):
        pass
