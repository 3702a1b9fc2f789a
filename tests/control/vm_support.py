"""What the VirtualMachine tests share: a daemon on a short data directory, disks, VMs, QMP."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from reconcile_support import Daemon

from diskferry.base import procstat
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.runtime.runner.base import Runner
from diskferry.nbd.volume import NbdVolume
from diskferry.qemu.qmp import Qmp

DISK_SIZE = "16Mi"


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    """A daemon over a data directory short enough for Unix socket paths under it."""
    with vm_daemon() as served:
        yield served


@contextlib.contextmanager
def vm_daemon(runner: Callable[[Path], Runner] | None = None) -> Iterator[Daemon]:
    """A daemon over a data directory short enough for Unix socket paths under it, its workers
    run by the runner `runner` makes for that directory (else this host's); its VMs' QEMUs
    ended after it."""
    base = Path(tempfile.mkdtemp(prefix="dfvm", dir="/tmp"))
    served = Daemon(base, runner=None if runner is None else runner(base))
    try:
        yield served
    finally:
        for vm in served.objects.list(REGISTRY.by_kind("VirtualMachine"), "default").items:
            qemu_pid = pid_of(served, vm["metadata"]["name"])
            if qemu_pid:
                procstat_kill(qemu_pid)
        served.stop()
        shutil.rmtree(base, ignore_errors=True)


def procstat_kill(pid: int) -> None:
    """End a QEMU a failed test left running."""
    if procstat.start_time(pid) is not None:
        os.kill(pid, signal.SIGKILL)


def pid_of(daemon: Daemon, name: str) -> int | None:
    """The pid the daemon recorded for the VM's QEMU, None when it has none."""
    state = daemon.data_dir / "vms" / "default" / name / "state.json"
    try:
        return json.loads(state.read_text())["pid"]
    except (OSError, ValueError):
        return None


def ready_disk(daemon: Daemon, name: str) -> Path:
    """A blank VirtualDisk, Ready; its file."""
    daemon.apply("VirtualDisk", name, {"persistentVolumeClaim": {"size": DISK_SIZE}})
    return daemon.claim(daemon.wait_phase("VirtualDisk", name, "Ready", timeout=30))


QUICK_STOP = {"terminationGracePeriodSeconds": 0}
"""The test VMs have no guest OS to power off on an ACPI request: ended at once."""


def apply_vm(daemon: Daemon, name: str, policy: str, disks: list[str], **spec: Any) -> None:
    """A VirtualMachine on the VirtualDisks `disks`, small, ended at once when stopped."""
    refs = [{"kind": "VirtualDisk", "name": d} for d in disks]
    body = {"runPolicy": policy, "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    daemon.apply("VirtualMachine", name, {**body, **QUICK_STOP, **spec})


def read_node(qmp_socket: str, node: str, offset: int = 0, length: int | None = None) -> bytes:
    """`length` bytes (all, by default) at `offset` of the VM's block node `node`, as the guest
    reads them."""
    path = str(Path(qmp_socket).with_name("nbd-test.sock"))
    with Qmp(qmp_socket) as qmp:
        qmp.command("nbd-server-start", addr={"type": "unix", "data": {"path": path}})
        qmp.command("block-export-add", type="nbd", id="t", node_name=node, name="t")
    try:
        volume = NbdVolume.open(f"nbd+unix:///t?socket={path}")
        try:
            buf = bytearray(volume.size - offset if length is None else length)
            volume.read_into(offset, buf)
            return bytes(buf)
        finally:
            volume.close()
    finally:
        with Qmp(qmp_socket) as qmp:
            qmp.command("block-export-del", id="t")
            qmp.command("nbd-server-stop")


def patch_vm(daemon: Daemon, name: str, patch: dict[str, Any]) -> None:
    """Merge `patch` into the VirtualMachine."""
    daemon.objects.patch(REGISTRY.by_kind("VirtualMachine"), "default", name, patch, "merge")


def hmp(socket: str, line: str) -> str:
    """Run an HMP command through QMP's human-monitor-command."""
    with Qmp(socket) as qmp:
        return qmp.command("human-monitor-command", command_line=line)


def create_vm(daemon: Daemon, name: str, spec: dict[str, Any], labels: dict[str, str]) -> None:
    """A VirtualMachine with `labels`, ended at once when stopped unless `spec` says otherwise."""
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": labels},
        "spec": {**QUICK_STOP, **spec},
    }
    daemon.objects.create(REGISTRY.by_kind("VirtualMachine"), "default", body)


def cbt_state(daemon: Daemon, name: str) -> str | None:
    """The VM's `status.changedBlockTracking.state`."""
    vm = daemon.get("VirtualMachine", name) or {}
    return vm.get("status", {}).get("changedBlockTracking", {}).get("state")


POWER_OFF = bytes.fromhex("BA0406B80020EFF4EBFE")
"""A boot sector's code that powers the PC off: `out 0x604, 0x2000` (PIIX4 ACPI S5), `hlt`."""


POWER_BUTTON = bytes.fromhex("BA0206B80001EFBA0006EDA9000174F7BA0406B80020EFF4EBFE")
"""A boot sector's code that powers the PC off once its power button is pressed (ACPI): enable
the button's event (`out 0x602, 0x100`), wait for its status bit (`in 0x600`), then S5."""


def write_boot_sector(disk: Path, code: bytes = POWER_OFF) -> None:
    """Make `disk` boot a guest running `code` (by default, one that powers itself off)."""
    sector = code + bytes(510 - len(code)) + b"\x55\xaa"
    with disk.open("r+b") as f:
        f.write(sector)
