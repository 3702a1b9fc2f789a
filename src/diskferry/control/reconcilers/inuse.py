"""Which VirtualMachines hold a VirtualDisk: those whose QEMU may be writing it now."""

from __future__ import annotations

from diskferry.control.resources.virtualmachine import (
    BlockDeviceKind,
    MachinePhase,
    VirtualMachine,
)
from diskferry.control.runtime.client import Client

IDLE_PHASES = (MachinePhase.STOPPED, MachinePhase.PENDING)
"""Phases in which no QEMU of the VM has its disks open."""


def holds_disks(vm: VirtualMachine) -> bool:
    """Whether the VM's QEMU may have its disks open (it runs, starts, stops or is paused)."""
    return vm.status.phase is not None and vm.status.phase not in IDLE_PHASES


def disk_holders(client: Client, namespace: str | None, disk: str) -> list[VirtualMachine]:
    """The VMs of `namespace` that hold the VirtualDisk `disk`, by name."""
    return sorted(
        (
            vm
            for vm in client.list(VirtualMachine, namespace)
            if holds_disks(vm)
            and any(
                ref.kind is BlockDeviceKind.VIRTUAL_DISK and ref.name == disk
                for ref in vm.spec.block_device_refs
            )
        ),
        key=lambda vm: vm.metadata.name or "",
    )


def names(vms: list[VirtualMachine]) -> str:
    """The VMs' names, comma-separated."""
    return ", ".join(vm.metadata.name or "" for vm in vms)
