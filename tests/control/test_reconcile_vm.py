"""VirtualMachines run as real qemu-system-x86_64 processes, kept to their run policy."""

from __future__ import annotations

import re
import stat
import subprocess
import time
from pathlib import Path

from control_support import wait_until
from reconcile_support import Daemon
from vm_support import (
    POWER_BUTTON,
    apply_vm,
    daemon,
    hmp,
    patch_vm,
    pid_of,
    ready_disk,
    write_boot_sector,
)

from diskferry.base import procstat
from diskferry.qemu.qmp import Qmp
from diskferry.qemu.system import VmConfig, VmDisk, command

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
    for folder in ("vms", "vms/default", "vms/default/vm-a"):  # the VM's sockets and logs
        assert stat.S_IMODE((daemon.data_dir / folder).stat().st_mode) == 0o700

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


def test_manual_leaves_a_new_vm_stopped(daemon: Daemon) -> None:
    ready_disk(daemon, "vd-m")
    apply_vm(daemon, "vm-m", "Manual", ["vd-m"])
    vm = daemon.wait_phase("VirtualMachine", "vm-m", "Stopped", timeout=30)
    assert pid_of(daemon, "vm-m") is None
    assert "qmpSocket" not in vm["status"]


def test_a_vm_with_qmp_socket_is_watched_never_started_or_stopped(daemon: Daemon) -> None:
    """A QEMU run by someone else, its socket in DATA_DIR/vm-sockets: Running with its own
    node names; AlwaysOff leaves it running; once it ends, the VM is Stopped."""
    disk = ready_disk(daemon, "vd-x")
    socket = daemon.data_dir / "vm-sockets" / "outside.sock"
    socket.parent.mkdir(mode=0o700)
    config = VmConfig(
        name="outside",
        cores=1,
        memory_bytes=64 << 20,
        disks=[VmDisk("theirs", str(disk))],
        monitors=[socket],
        serial_log=daemon.data_dir / "outside.log",
    )
    qemu = subprocess.Popen(command(config), stdin=subprocess.DEVNULL)
    try:
        wait_until(socket.exists, 30)
        apply_vm(daemon, "vm-x", "AlwaysOff", ["vd-x"], qmpSocket=str(socket))
        vm = daemon.wait_phase("VirtualMachine", "vm-x", "Running", timeout=30)
        assert vm["status"]["qmpSocket"] == str(socket)
        assert vm["status"]["blockDevices"][0]["target"] == "theirs"
        assert qemu.poll() is None  # AlwaysOff does not stop what diskferry does not run
        qemu.terminate()
        qemu.wait(10)
        daemon.wait_phase("VirtualMachine", "vm-x", "Stopped", timeout=30)
    finally:
        qemu.kill()
        qemu.wait()


def test_a_guest_power_off_stays_off_unless_the_policy_is_always_on(daemon: Daemon) -> None:
    """A guest that powers itself off: AlwaysOnUnlessStoppedManually leaves it Stopped
    (GuestShutdown); switched to AlwaysOn, it is started again."""
    write_boot_sector(ready_disk(daemon, "vd-p"))
    apply_vm(daemon, "vm-p", "AlwaysOnUnlessStoppedManually", ["vd-p"])
    first = wait_until(lambda: pid_of(daemon, "vm-p"), 30)
    vm = daemon.wait_phase("VirtualMachine", "vm-p", "Stopped", timeout=30)
    ready = next(c for c in vm["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "GuestShutdown"
    assert procstat.start_time(first) is None
    time.sleep(1)  # a restart would follow the Stopped status within STEP_SECONDS
    assert pid_of(daemon, "vm-p") == first  # not started again

    patch_vm(daemon, "vm-p", {"spec": {"runPolicy": "AlwaysOn"}})
    wait_until(lambda: pid_of(daemon, "vm-p") != first, 30)


def test_an_image_attaches_read_only_and_the_guest_agent_has_its_socket(daemon: Daemon) -> None:
    """A VirtualImage kept in a claim is a disk the guest cannot write; enableGuestAgent gives
    the VM an agent channel and its socket."""
    ready_disk(daemon, "vd-i")
    source = {"type": "ObjectRef", "objectRef": {"kind": "VirtualDisk", "name": "vd-i"}}
    daemon.apply("VirtualImage", "vi-i", {"storage": "PersistentVolumeClaim", "dataSource": source})
    image = daemon.claim(daemon.wait_phase("VirtualImage", "vi-i", "Ready", timeout=60))
    refs = [{"kind": "VirtualDisk", "name": "vd-i"}, {"kind": "VirtualImage", "name": "vi-i"}]
    body = {"runPolicy": "AlwaysOn", "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    daemon.apply("VirtualMachine", "vm-i", {**body, "enableGuestAgent": True})
    status = daemon.wait_phase("VirtualMachine", "vm-i", "Running", timeout=30)["status"]
    assert status["blockDevices"][1] == {
        "kind": "VirtualImage",
        "name": "vi-i",
        "target": "vi-vi-i",
        "readOnly": True,
    }
    refused = hmp(status["qmpSocket"], 'qemu-io -d vi-vi-i "write -P 0x11 0 4k"')
    assert "read-only" in refused
    assert image.read_bytes()[:4096] == bytes(4096)
    assert status["guestAgentSocket"].endswith("/vms/default/vm-i/agent.sock")
    with Qmp(status["qmpSocket"]) as qmp:
        chardevs = {c["label"]: c for c in qmp.command("query-chardev")}
    assert status["guestAgentSocket"] in chardevs["agent"]["filename"]


def test_a_qemu_that_will_not_start_is_degraded_with_its_reason(daemon: Daemon) -> None:
    """A second VM on a disk the first one has open: QEMU refuses it (the image lock), and
    the VM is Degraded with QEMU's words in its condition and a Warning Event."""
    ready_disk(daemon, "vd-l")
    apply_vm(daemon, "vm-l1", "AlwaysOn", ["vd-l"])
    daemon.wait_phase("VirtualMachine", "vm-l1", "Running", timeout=30)
    apply_vm(daemon, "vm-l2", "AlwaysOn", ["vd-l"])
    vm = daemon.wait_phase("VirtualMachine", "vm-l2", "Degraded", timeout=30)
    ready = next(c for c in vm["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "QemuFailed" and "lock" in ready["message"]
    warnings = [e for e in daemon.events("vm-l2") if e["type"] == "Warning"]
    assert any("lock" in e["message"] for e in warnings)
    tried = pid_of(daemon, "vm-l2")
    time.sleep(1)  # the next try waits RETRY_SECONDS, however often the VM is reconciled
    assert pid_of(daemon, "vm-l2") == tried
    logged = daemon.controllers.log_tail("VirtualMachine", "default", "vm-l2")
    assert any("lock" in line for line in logged)  # what `diskferry logs vm vm-l2` shows
    assert daemon.get("VirtualMachine", "vm-l1")["status"]["phase"] == "Running"


def test_socket_paths_too_long_make_the_vm_degraded_saying_so(tmp_path: Path) -> None:
    deep = Daemon(tmp_path / ("d" * 90))
    try:
        ready_disk(deep, "vd-s")
        apply_vm(deep, "vm-s", "AlwaysOn", ["vd-s"])
        vm = deep.wait_phase("VirtualMachine", "vm-s", "Degraded", timeout=30)
        ready = next(c for c in vm["status"]["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "MachineFailed"
        assert "longer than 107 bytes" in ready["message"]
        assert pid_of(deep, "vm-s") is None
    finally:
        deep.stop()


def in_boot_sector(qmp_socket: str) -> bool:
    """Whether the guest runs its boot sector's code (at 0x7c00), past the BIOS."""
    found = re.search(r"EIP=([0-9a-f]+)", hmp(qmp_socket, "info registers"))
    return found is not None and 0x7C00 <= int(found[1], 16) < 0x7E00


def ready_reason(daemon: Daemon, name: str) -> dict:
    """The VM's Ready condition."""
    vm = daemon.get("VirtualMachine", name) or {}
    return next(c for c in vm["status"]["conditions"] if c["type"] == "Ready")


def test_a_stopping_vm_gets_an_acpi_shutdown_and_its_grace_period(daemon: Daemon) -> None:
    """AlwaysOff asks the guest to power off (ACPI): one that does is Stopped well within its
    terminationGracePeriodSeconds; one that does not is ended once the period is over."""
    write_boot_sector(ready_disk(daemon, "vd-g"), POWER_BUTTON)
    ready_disk(daemon, "vd-h")  # nothing boots from it: no one presses the button
    apply_vm(daemon, "vm-g", "AlwaysOn", ["vd-g"], terminationGracePeriodSeconds=600)
    apply_vm(daemon, "vm-h", "AlwaysOn", ["vd-h"], terminationGracePeriodSeconds=1)
    running = daemon.wait_phase("VirtualMachine", "vm-g", "Running", timeout=30)
    daemon.wait_phase("VirtualMachine", "vm-h", "Running", timeout=30)
    wait_until(lambda: in_boot_sector(running["status"]["qmpSocket"]), 60)  # past the BIOS
    for name in ("vm-g", "vm-h"):
        patch_vm(daemon, name, {"spec": {"runPolicy": "AlwaysOff"}})
    daemon.wait_phase("VirtualMachine", "vm-g", "Stopped", timeout=60)
    assert ready_reason(daemon, "vm-g")["reason"] == "GuestPoweredOff"
    daemon.wait_phase("VirtualMachine", "vm-h", "Stopped", timeout=60)
    ended = ready_reason(daemon, "vm-h")
    assert ended["reason"] == "GracePeriodOver"
    assert "did not power off within 1 s" in ended["message"]
    assert "terminationGracePeriodSeconds" in ended["message"]


def test_always_on_unless_stopped_manually_is_the_default_and_a_policy_flip_starts_it(
    daemon: Daemon,
) -> None:
    """A VM with no runPolicy starts; powered off from inside it stays off (GuestShutdown);
    set AlwaysOff and back, it starts again."""
    write_boot_sector(ready_disk(daemon, "vd-u"))
    refs = [{"kind": "VirtualDisk", "name": "vd-u"}]
    daemon.apply("VirtualMachine", "vm-u", {"blockDeviceRefs": refs, "memory": {"size": "64Mi"}})
    first = wait_until(lambda: pid_of(daemon, "vm-u"), 30)
    daemon.wait_phase("VirtualMachine", "vm-u", "Stopped", timeout=30)
    assert ready_reason(daemon, "vm-u")["reason"] == "GuestShutdown"
    patch_vm(daemon, "vm-u", {"spec": {"runPolicy": "AlwaysOff"}})
    wait_until(lambda: ready_reason(daemon, "vm-u")["reason"] == "Stopped", 30)
    patch_vm(daemon, "vm-u", {"spec": {"runPolicy": "AlwaysOnUnlessStoppedManually"}})
    wait_until(lambda: pid_of(daemon, "vm-u") != first, 30)


def condition_of(daemon: Daemon, name: str, kind: str) -> dict | None:
    """The VM's condition of `kind`."""
    vm = daemon.get("VirtualMachine", name) or {}
    return next((c for c in vm["status"]["conditions"] if c["type"] == kind), None)


def test_changes_needing_a_restart_wait_for_one_or_restart_it_when_automatic(
    daemon: Daemon,
) -> None:
    """Two cores asked of a running one-core VM: it runs on, AwaitingRestartToApplyConfiguration
    and restartAwaitingChanges saying what waits; disruptions Automatic restarts it on two."""
    ready_disk(daemon, "vd-n")
    apply_vm(daemon, "vm-n", "Manual", ["vd-n"])
    patch_vm(daemon, "vm-n", {"spec": {"runPolicy": "AlwaysOn"}})
    daemon.wait_phase("VirtualMachine", "vm-n", "Running", timeout=30)
    patch_vm(daemon, "vm-n", {"spec": {"runPolicy": "Manual"}})  # applies without a restart
    first = pid_of(daemon, "vm-n")
    patch_vm(daemon, "vm-n", {"spec": {"cpu": {"cores": 2}}})
    waiting = wait_until(
        lambda: condition_of(daemon, "vm-n", "AwaitingRestartToApplyConfiguration"), 30
    )
    assert waiting["status"] == "True" and waiting["reason"] == "ChangesPendingRestart"
    vm = daemon.get("VirtualMachine", "vm-n")
    assert vm["status"]["restartAwaitingChanges"] == [
        {"operation": "replace", "path": "cpu.cores", "currentValue": 1, "desiredValue": 2}
    ]
    assert vm["status"]["resources"]["cpu"]["cores"] == 1 and pid_of(daemon, "vm-n") == first
    patch_vm(daemon, "vm-n", {"spec": {"disruptions": {"restartApprovalMode": "Automatic"}}})
    wait_until(lambda: pid_of(daemon, "vm-n") not in (None, first), 60)
    vm = daemon.wait_phase("VirtualMachine", "vm-n", "Running", timeout=30)
    assert vm["status"]["resources"]["cpu"]["cores"] == 2
    wait_until(
        lambda: condition_of(daemon, "vm-n", "AwaitingRestartToApplyConfiguration") is None, 30
    )
