"""VirtualMachines run as real qemu-system-x86_64 processes, kept to their run policy."""

from __future__ import annotations

from control_support import wait_until
from reconcile_support import Daemon
from vm_support import apply_vm, daemon, hmp, patch_vm, pid_of, ready_disk

from diskferry.disk import procstat
from diskferry.qemu.qmp import Qmp

__all__ = ["daemon"]


def test_always_on_runs_and_guest_writes_land_then_always_off_stops(daemon: Daemon) -> None:
    """AlwaysOn → Running with a QMP socket that answers; a write through it reaches the
    disk's file; AlwaysOff → Stopped and the process is gone."""
    disk = ready_disk(daemon, "vd-a")
    apply_vm(daemon, "vm-a", "AlwaysOn", ["vd-a"])
    vm = daemon.wait_phase("VirtualMachine", "vm-a", "Running", timeout=30)
    status = vm["status"]
    assert status["blockDevices"] == [
        {"kind": "VirtualDisk", "name": "vd-a", "target": "vd-vd-a", "readOnly": False}
    ]
    assert status["changedBlockTracking"] == {"state": "Disabled"}
    with Qmp(status["qmpSocket"]) as qmp:
        assert qmp.command("query-status")["status"] == "running"
    hmp(status["qmpSocket"], 'qemu-io -d vd-vd-a "write -P 0x5a 1M 64k"')
    with disk.open("rb") as f:
        f.seek(1 << 20)
        assert f.read(65536) == b"\x5a" * 65536
    pid = pid_of(daemon, "vm-a")
    assert pid and procstat.start_time(pid) is not None

    patch_vm(daemon, "vm-a", {"spec": {"runPolicy": "AlwaysOff"}})
    vm = daemon.wait_phase("VirtualMachine", "vm-a", "Stopped", timeout=30)
    assert "qmpSocket" not in vm["status"]
    assert procstat.start_time(pid) is None


def test_always_on_restarts_a_vm_that_died(daemon: Daemon) -> None:
    """A killed QEMU of an AlwaysOn VM is started again."""
    ready_disk(daemon, "vd-b")
    apply_vm(daemon, "vm-b", "AlwaysOn", ["vd-b"])
    daemon.wait_phase("VirtualMachine", "vm-b", "Running", timeout=30)
    first = pid_of(daemon, "vm-b")
    assert first
    with Qmp(daemon.get("VirtualMachine", "vm-b")["status"]["qmpSocket"]) as qmp:
        qmp.command("quit")
    wait_until(lambda: (p := pid_of(daemon, "vm-b")) != first and procstat.start_time(p), 30)
    daemon.wait_phase("VirtualMachine", "vm-b", "Running", timeout=30)


def test_pending_names_the_disk_it_waits_for(daemon: Daemon) -> None:
    """A VM on a VirtualDisk that does not exist waits in Pending and says which."""
    apply_vm(daemon, "vm-c", "AlwaysOn", ["vd-missing"])
    vm = daemon.wait_phase("VirtualMachine", "vm-c", "Pending", timeout=30)
    ready = next(c for c in vm["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert "VirtualDisk vd-missing" in ready["message"]


def test_deleting_a_running_vm_stops_its_qemu(daemon: Daemon) -> None:
    """Deleting the VM ends its process and removes its directory."""
    ready_disk(daemon, "vd-d")
    apply_vm(daemon, "vm-d", "AlwaysOn", ["vd-d"])
    daemon.wait_phase("VirtualMachine", "vm-d", "Running", timeout=30)
    pid = pid_of(daemon, "vm-d")
    assert pid
    daemon.objects.delete(daemon.objects.registry.by_kind("VirtualMachine"), "default", "vm-d")
    wait_until(lambda: daemon.get("VirtualMachine", "vm-d") is None, 30)
    assert procstat.start_time(pid) is None
    assert not (daemon.data_dir / "vms" / "default" / "vm-d").exists()
