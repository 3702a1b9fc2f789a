"""`diskferry cbt enable|status|disable`, run as the real command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

MiB = 1 << 20


def run(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("diskferry")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def volume(tmp_path: Path) -> str:
    path = tmp_path / "vm disk.raw"
    with open(path, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(3 * MiB)
        f.write(b"data that stays")
    return str(path)


def test_enable_status_disable(volume: str) -> None:
    off = run("cbt", "status", volume, "--json")
    assert off.returncode == 0, off.stderr
    assert json.loads(off.stdout)["enabled"] is False

    enabled = run("cbt", "enable", volume)
    assert enabled.returncode == 0, enabled.stderr
    assert enabled.stdout == ""
    assert f"run the VM on {volume}.cbt.qcow2" in enabled.stderr

    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", "write -P 0x5a 0 64k", volume + ".cbt.qcow2"],
        check=True,
        capture_output=True,
    )
    for path in (volume, volume + ".cbt.qcow2"):
        status = run("cbt", "status", path, "--json")
        assert status.returncode == 0, status.stderr
        state = json.loads(status.stdout)
        assert (state["volume"], state["overlay"]) == (volume, volume + ".cbt.qcow2")
        assert state["size"] == 16 * MiB
        assert [(c["name"], c["enabled"], c["granularity"]) for c in state["checkpoints"]] == [
            ("diskferry-base", True, 65536)
        ]
        assert state["checkpoints"][0]["dirtyBytes"] == 64 * 1024
        assert not [k for k in [*state, *state["checkpoints"][0]] if "_" in k]
    text = run("cbt", "status", volume).stdout
    assert "size: 16.0 MiB\n" in text
    assert "  diskferry-base  64.0 KiB dirty  recording\n" in text
    assert all(len(line) <= 80 for line in text.splitlines() if volume not in line)

    disabled = run("cbt", "disable", volume + ".cbt.qcow2", "--json")
    assert disabled.returncode == 0, disabled.stderr
    assert json.loads(disabled.stdout) == {"volume": volume, "enabled": False}
    assert sorted(p.name for p in Path(volume).parent.iterdir()) == ["vm disk.raw"]
    with open(volume, "rb") as f:
        assert f.read(2) == b"\x5a\x5a"
        f.seek(3 * MiB)
        assert f.read(15) == b"data that stays"


def test_errors_are_one_line(volume: str, tmp_path: Path) -> None:
    assert run("cbt", "enable", volume).returncode == 0
    again = run("cbt", "enable", volume)
    assert again.returncode == 1
    assert again.stderr.strip().splitlines() == [
        f"diskferry: error: CBT is already enabled on {volume} ({volume}.cbt.qcow2)"
    ]
    missing = run("cbt", "status", str(tmp_path / "nothing.raw"))
    assert missing.returncode == 1
    assert missing.stderr.startswith("diskferry: error: ")
    assert "does not exist" in missing.stderr
