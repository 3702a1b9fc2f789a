"""A VirtualDiskSnapshot of a disk that a running VirtualMachine holds, as Deckhouse's
`requiredConsistency` says: required, it waits for the VM to stop (or is taken at an instant
with the guest frozen through its agent); not required, it is taken at once, inconsistent."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from reconcile_support import Daemon
from vm_support import apply_vm, patch_vm, pid_of, procstat_kill, ready_disk

from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.host.machines import Sockets
from diskferry.control.resources.registry import REGISTRY

sys.path.insert(0, str(Path(__file__).parent.parent / "qemu"))

from guest_agent import GuestAgent, jailed_agent

SNAPSHOT = "VirtualDiskSnapshot"


def stop_vms(daemon: Daemon) -> None:
    for vm in daemon.objects.list(REGISTRY.by_kind("VirtualMachine"), "default").items:
        qemu_pid = pid_of(daemon, vm["metadata"]["name"])
        if qemu_pid:
            procstat_kill(qemu_pid)
    daemon.stop()


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    base = Path(tempfile.mkdtemp(prefix="dfvs", dir="/tmp"))
    served = Daemon(base)
    try:
        yield served
    finally:
        stop_vms(served)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def xfs_daemon() -> Iterator[Daemon]:
    """A daemon whose data directory is an XFS filesystem that shares extents (reflink)."""
    base = Path(tempfile.mkdtemp(prefix="dfvx", dir="/tmp"))
    image, mount = base / "xfs.img", base / "d"
    with open(image, "wb") as f:
        f.truncate(512 << 20)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    mount.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    served = Daemon(mount)
    try:
        yield served
    finally:
        stop_vms(served)
        subprocess.run(["umount", "--lazy", str(mount)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def running(daemon: Daemon, name: str, disk: str, **spec: Any) -> Path:
    path = ready_disk(daemon, disk)
    path.write_bytes(b"\x5a" * 65536 + path.read_bytes()[65536:])
    apply_vm(daemon, name, "AlwaysOn", [disk], **spec)
    daemon.wait_phase("VirtualMachine", name, "Running", timeout=60)
    return path


def snapshot(daemon: Daemon, name: str, disk: str, **spec: Any) -> None:
    daemon.apply(SNAPSHOT, name, {"virtualDiskName": disk, **spec})


def reason(obj: dict[str, Any] | None) -> str | None:
    found = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c["reason"] for c in found if c["type"] == "Ready"), None)


def test_a_required_snapshot_waits_for_the_vm_to_stop_then_is_consistent(daemon) -> None:
    disk = running(daemon, "vm1", "vd1")
    snapshot(daemon, "s1", "vd1")
    wait_until(lambda: reason(daemon.get(SNAPSHOT, "s1")) == "PotentiallyInconsistent", 30)
    waiting = daemon.get(SNAPSHOT, "s1")
    assert waiting["status"]["phase"] == "Pending"
    message = next(c["message"] for c in waiting["status"]["conditions"] if c["type"] == "Ready")
    assert "in use by the running VirtualMachine vm1" in message
    assert "waits for the VM to stop or for its guest agent" in message
    patch_vm(daemon, "vm1", {"spec": {"runPolicy": "AlwaysOff"}})
    daemon.wait_phase("VirtualMachine", "vm1", "Stopped", timeout=60)
    ready = daemon.wait_phase(SNAPSHOT, "s1", "Ready", "Failed", timeout=60)
    assert ready["status"]["phase"] == "Ready" and ready["status"]["consistent"] is True
    copy = daemon.data_dir / "volumes" / "local" / "default"
    assert (copy / f"{ready['status']['volumeSnapshotName']}.img").read_bytes() == (
        disk.read_bytes()
    )


def test_a_snapshot_that_needs_no_consistency_is_taken_at_once_inconsistent(daemon) -> None:
    running(daemon, "vm1", "vd1")
    snapshot(daemon, "s1", "vd1", requiredConsistency=False)
    ready = daemon.wait_phase(SNAPSHOT, "s1", "Ready", "Failed", timeout=60)
    assert ready["status"]["phase"] == "Ready"
    assert ready["status"]["consistent"] is False


def test_a_required_snapshot_of_a_disk_in_use_is_an_instant_copy_of_a_frozen_guest(
    xfs_daemon, tmp_path, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="diskferry.control")
    with jailed_agent(tmp_path) as agent:
        guest: GuestAgent = agent
        own = QemuMachines.sockets

        def sockets(machines: QemuMachines, vm: Any) -> Sockets:
            return Sockets(own(machines, vm).qmp, guest.socket)

        monkeypatch.setattr(QemuMachines, "sockets", sockets)
        disk = running(xfs_daemon, "vm1", "vd1")
        snapshot(xfs_daemon, "s1", "vd1")
        ready = xfs_daemon.wait_phase(SNAPSHOT, "s1", "Ready", "Failed", timeout=60)
        assert ready["status"]["phase"] == "Ready" and ready["status"]["consistent"] is True

        def worker_log() -> list[str]:
            said = [r.getMessage() for r in caplog.records]
            return [line for line in said if line.startswith(f"{SNAPSHOT} ")]

        # the worker's log is logged once its job is settled, which may follow the status
        wait_until(lambda: any("thawed 1 guest" in line for line in worker_log()), 30)
        worker = worker_log()
        froze = next(i for i, line in enumerate(worker) if "froze the guest" in line)
        thawed = next(i for i, line in enumerate(worker) if "thawed 1 guest" in line)
        assert froze < thawed  # the worker froze the guest around its clone, and thawed it
        assert guest.command("guest-fsfreeze-status") == "thawed"
    copy = xfs_daemon.data_dir / "volumes" / "local" / "default"
    assert (copy / f"{ready['status']['volumeSnapshotName']}.img").read_bytes() == (
        disk.read_bytes()
    )
