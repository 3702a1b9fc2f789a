"""`diskferry demo` end to end: import, export, backup and restore, each verified."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


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
