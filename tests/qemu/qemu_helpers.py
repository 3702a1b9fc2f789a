"""Helpers for the QEMU tests: write through qemu-io, read and map exports with nbd tools."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from diskferry.qemu import cbt
from diskferry.qemu.storage_daemon import StorageDaemon

MiB = 1 << 20
KiB = 1 << 10


def write(target: str, offset: int, length: int, pattern: int) -> None:
    """Write `pattern` bytes through qemu-io into a CBT overlay file or an NBD URL."""
    fmt = "raw" if target.startswith("nbd") else "qcow2"
    cmd = ["qemu-io", "-f", fmt, "-c", f"write -P {pattern:#x} {offset} {length}", target]
    try:
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        e.add_note(f"qemu-io said: {e.stderr.strip() or e.stdout.strip()}")
        raise


def read(url: str, offset: int, length: int) -> bytes:
    """The bytes an NBD export serves at `offset`."""
    proc = subprocess.run(["nbdcopy", url, "-"], check=True, capture_output=True)
    return proc.stdout[offset : offset + length]


def dirty_runs(url: str, context: str) -> list[tuple[int, int]]:
    """The (offset, length) runs `nbdinfo --map=CONTEXT` reports dirty."""
    proc = subprocess.run(
        ["nbdinfo", f"--map={context}", "--json", url], check=True, capture_output=True, text=True
    )
    return [(e["offset"], e["length"]) for e in json.loads(proc.stdout) if e["type"] & 1]


def image_bitmaps(overlay: str) -> dict[str, list[str]]:
    """The bitmaps `qemu-img info` lists in an overlay, with their flags."""
    proc = subprocess.run(
        ["qemu-img", "info", "--force-share", "--output=json", overlay],
        check=True,
        capture_output=True,
        text=True,
    )
    data = json.loads(proc.stdout)["format-specific"]["data"]
    return {b["name"]: b["flags"] for b in data.get("bitmaps", [])}


def bare_daemon(overlay: str) -> subprocess.Popen[bytes]:
    """A qemu-storage-daemon with the overlay open and nothing else: one to kill in tests."""
    spec = {"driver": "qcow2", "node-name": "d", "file": {"driver": "file", "filename": overlay}}
    return subprocess.Popen(["qemu-storage-daemon", "--blockdev", json.dumps(spec)])


@dataclass
class Vm:
    """A running QEMU that serves a disk: its monitor, and a writable NBD export of the disk."""

    daemon: StorageDaemon
    url: str
    disk: cbt.CbtDisk

    @property
    def qmp_socket(self) -> str:
        return self.daemon.qmp_socket

    @property
    def nbd_socket(self) -> str:
        return self.daemon.nbd_socket
