"""Which VirtualMachines use a disk or an image: those that name it (in their spec, or as a
device their QEMU was started with), and of them those that hold it, whose QEMU may have it
open now."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from diskferry.control.resources.model import Resource
from diskferry.control.resources.virtualmachine import (
    BlockDeviceKind,
    MachinePhase,
    VirtualMachine,
)
from diskferry.control.runtime.client import Client

IDLE_PHASES = (MachinePhase.STOPPED, MachinePhase.PENDING)
"""Phases in which no QEMU of the VM has its disks open."""
CLUSTER_WIDE = BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE


def holds_disks(vm: VirtualMachine) -> bool:
    """Whether the VM's QEMU may have its disks open (it runs, starts, stops or is paused)."""
    return vm.status.phase is not None and vm.status.phase not in IDLE_PHASES


def _named(vm: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The (kind, name) of each device the VM's spec names or its QEMU was started with."""
    refs = (vm.get("spec") or {}).get("blockDeviceRefs") or []
    devices = (vm.get("status") or {}).get("blockDevices") or []
    for device in [*refs, *devices]:
        yield str(device.get("kind") or ""), str(device.get("name") or "")


def devices_named(vm: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    """The (kind, namespace, name) of each disk and image the VM (as API values) names; a
    ClusterVirtualImage has no namespace."""
    namespace = (vm.get("metadata") or {}).get("namespace")
    return sorted(
        {(kind, None if kind == CLUSTER_WIDE else namespace, name) for kind, name in _named(vm)},
        key=str,
    )


def _users(
    client: Client, kind: BlockDeviceKind, namespace: str | None, name: str
) -> list[VirtualMachine]:
    """The VMs of `namespace` (all, when None) that name the device, by namespace and name."""
    wanted = (str(kind), name)
    found = [vm for vm in client.list(VirtualMachine, namespace) if wanted in _named(vm.to_json())]
    return sorted(found, key=lambda vm: (vm.metadata.namespace or "", vm.metadata.name or ""))


def users(client: Client, device: Resource) -> list[VirtualMachine]:
    """The VMs that name the VirtualDisk, VirtualImage or ClusterVirtualImage `device`: of its
    namespace, or of any for a ClusterVirtualImage; by namespace and name."""
    kind = BlockDeviceKind(device.kind)
    namespace = None if kind is CLUSTER_WIDE else device.metadata.namespace
    return _users(client, kind, namespace, device.metadata.name or "")


def holders(client: Client, device: Resource) -> list[VirtualMachine]:
    """The VMs that hold `device` now: of those that name it, the ones whose QEMU may have it
    open."""
    return [vm for vm in users(client, device) if holds_disks(vm)]


def disk_holders(client: Client, namespace: str | None, disk: str) -> list[VirtualMachine]:
    """The VMs of `namespace` that hold the VirtualDisk `disk`, by name."""
    found = _users(client, BlockDeviceKind.VIRTUAL_DISK, namespace, disk)
    return [vm for vm in found if holds_disks(vm)]


def names(vms: list[VirtualMachine]) -> str:
    """The VMs' names, comma-separated."""
    return ", ".join(vm.metadata.name or "" for vm in vms)
