"""`diskferry demo` end to end: the daemon's disks, image and export, the download through the
proxy, backup and restore, each verified, and nothing left running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from diskferry.cli import demo_cmd
from diskferry.qemu import img


def _workers_under(directory: Path) -> list[int]:
    """The processes whose working directory is under `directory`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(directory)):
            found.append(int(pid))
    return found


@pytest.mark.long
def test_demo_runs_every_step_and_verifies_it(tmp_path: Path) -> None:
    work = tmp_path / "d"
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", "demo", "--dir", str(work)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.splitlines()
    for _, name in demo_cmd._OBJECTS:
        assert any(line.endswith(f"/{name} condition met") for line in out), name
    lines = proc.stderr.splitlines()
    assert any("downloaded through the proxy; qemu-img compare" in ln for ln in lines)
    assert any("backup 1: full" in ln for ln in lines)
    assert any("backup 2: incremental" in ln and "read 1048576 bytes" in ln for ln in lines)
    assert sum("qemu-img compare: equal" in ln and "restored" in ln for ln in lines) == 2
    assert any(f"kubectl --kubeconfig {work / 'data/kubeconfig'}" in ln for ln in lines)
    downloaded = work / "downloaded.img"
    restored = work / "restored-1.img"
    assert img.compare(str(restored), str(work / "served/sample.raw"), "raw", "raw")
    assert restored.stat().st_size == downloaded.stat().st_size == 512 << 20  # the claim's size
    assert downloaded.stat().st_blocks * 512 < downloaded.stat().st_size // 2
    assert len(list((work / "data/volumes").rglob("*.img"))) == 4  # three disks, one image
    assert _workers_under(work) == []


def test_a_demo_command_that_hangs_is_a_demo_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_cmd, "_STEP_SECONDS", 1)
    with pytest.raises(demo_cmd.DemoError, match="a sleeper did not finish within 1 s"):
        demo_cmd._step([sys.executable, "-c", "import time; time.sleep(60)"], "a sleeper")


def test_a_daemon_that_cannot_start_is_a_demo_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with (
        pytest.raises(demo_cmd.DemoError, match="diskferry serve did not start"),
        demo_cmd._daemon(blocker / "data", tmp_path / "serve.log"),
    ):
        pass
