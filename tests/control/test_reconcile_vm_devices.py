"""What a VM's spec makes of its QEMU, as Deckhouse's does of its KubeVirt VM: the firmware
(BIOS, EFI, EFI with Secure Boot), the devices a guest without virtio drivers needs, the Main
network's NIC, the boot order."""

from __future__ import annotations

import json
import stat
from typing import Any

from control_support import wait_until
from reconcile_support import Daemon
from vm_support import create_vm, daemon, ready_disk

from diskferry.qemu.qmp import Qmp

__all__ = ["daemon"]


def running(daemon: Daemon, name: str, disks: list[str], **spec: Any) -> dict[str, Any]:
    """The status of a running VM on `disks` with `spec`."""
    for disk in disks:
        ready_disk(daemon, disk)
    refs = [{"kind": "VirtualDisk", "name": d} for d in disks]
    body = {"runPolicy": "AlwaysOn", "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    create_vm(daemon, name, {**body, **spec}, {})
    vm = daemon.wait_phase("VirtualMachine", name, "Running", "Pending", "Degraded", timeout=90)
    assert vm["status"]["phase"] == "Running", vm["status"]
    return vm["status"]


def prop(qmp_socket: str, device: str, name: str) -> Any:
    """A property of the VM's device `device`."""
    with Qmp(qmp_socket) as qmp:
        return qmp.command("qom-get", path=f"/machine/peripheral/{device}", property=name)


def argv_of(daemon: Daemon, name: str) -> list[str]:
    """The command line the VM's QEMU was started with."""
    return json.loads((daemon.data_dir / f"vms/default/{name}/state.json").read_text())["argv"]


def test_a_windows_guest_without_virtio_on_efi(daemon: Daemon) -> None:
    """EFI: OVMF from flash, the VM's own variables 0600 in its folder; no paravirtualization:
    SATA disks and an e1000 NIC whose MAC status.networks gives."""
    spec = {"bootloader": "EFI", "osType": "Windows", "enableParavirtualization": False}
    status = running(daemon, "vm-w", ["vd-w"], **spec)
    argv = argv_of(daemon, "vm-w")
    assert "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd" in argv
    variables = daemon.data_dir / "vms/default/vm-w/efivars.fd"
    assert f"if=pflash,format=raw,unit=1,file={variables}" in argv
    assert stat.S_IMODE(variables.stat().st_mode) == 0o600
    assert prop(status["qmpSocket"], "vd-vd-w", "type") == "ide-hd"
    assert prop(status["qmpSocket"], "nic0", "type") == "e1000"
    [network] = status["networks"]
    assert network == {"type": "Main", "macAddress": prop(status["qmpSocket"], "nic0", "mac")}


def test_secure_boot_runs_on_a_q35_machine_with_smm(daemon: Daemon) -> None:
    status = running(daemon, "vm-s", ["vd-s"], bootloader="EFIWithSecureBoot")
    with Qmp(status["qmpSocket"]) as qmp:
        assert qmp.command("qom-get", path="/machine", property="smm") == "on"
    assert "file=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd" in " ".join(argv_of(daemon, "vm-s"))
    assert (daemon.data_dir / "vms/default/vm-s/efivars-secureboot.fd").exists()


def test_boot_order_and_networks_this_host_has_not(daemon: Daemon) -> None:
    networks = [{"type": "Main"}, {"type": "Network", "name": "user-net"}]
    status = running(daemon, "vm-b", ["vd-b1", "vd-b2"], networks=networks)
    assert prop(status["qmpSocket"], "vd-vd-b1", "bootindex") == 1
    assert prop(status["qmpSocket"], "vd-vd-b1", "type") == "scsi-hd"
    assert prop(status["qmpSocket"], "nic0", "type") == "virtio-net-pci"
    assert [n["type"] for n in status["networks"]] == ["Main"]
    ready = next(c for c in status["conditions"] if c["type"] == "NetworkReady")
    assert ready["status"] == "False" and "user-net" in ready["message"]

    refs = [
        {"kind": "VirtualDisk", "name": "vd-b1"},
        {"kind": "VirtualDisk", "name": "vd-b2", "bootOrder": 1},
    ]
    ready_disk(daemon, "vd-c1")
    refs = [{"kind": "VirtualDisk", "name": "vd-c1"}, {**refs[1], "name": "vd-c2"}]
    ready_disk(daemon, "vd-c2")
    body = {"runPolicy": "AlwaysOn", "blockDeviceRefs": refs, "memory": {"size": "64Mi"}}
    create_vm(daemon, "vm-c", body, {})
    ordered = daemon.wait_phase("VirtualMachine", "vm-c", "Running", timeout=90)["status"]
    assert prop(ordered["qmpSocket"], "vd-vd-c2", "bootindex") == 1
    assert prop(ordered["qmpSocket"], "vd-vd-c1", "bootindex") == 2
    assert ordered["blockDeviceRefs"] == [
        {"kind": "VirtualDisk", "name": "vd-c1", "size": "16Mi", "attached": True, "bootOrder": 2},
        {"kind": "VirtualDisk", "name": "vd-c2", "size": "16Mi", "attached": True, "bootOrder": 1},
    ]


def test_the_guest_agent_and_the_qemu_version_in_the_status(daemon: Daemon) -> None:
    """The VM's agent channel, no agent behind it (no guest OS): AgentReady False, saying so;
    no guestOSInfo nor address; QEMU's version in status.versions."""
    status = running(daemon, "vm-a", ["vd-a"])
    agent = wait_until(lambda: condition(daemon, "vm-a", "AgentReady"), 30)
    assert agent["status"] == "False" and "qemu-guest-agent" in agent["message"]
    vm = daemon.get("VirtualMachine", "vm-a")
    assert "guestOSInfo" not in vm["status"] and "ipAddress" not in vm["status"]
    with Qmp(status["qmpSocket"]) as qmp:
        version = qmp.command("query-version")["qemu"]
    wanted = f"{version['major']}.{version['minor']}.{version['micro']}"
    assert vm["status"]["versions"] == {"qemu": wanted}


def condition(daemon: Daemon, name: str, kind: str) -> dict[str, Any] | None:
    """The VM's condition of `kind`."""
    vm = daemon.get("VirtualMachine", name) or {}
    return next((c for c in vm["status"].get("conditions", []) if c["type"] == kind), None)
