"""What a VM is started with, from its spec and its class (`machine_spec`, what the host's
machines take): the virtual CPU and its topology, the memory, the disks' bus (virtio unless the
guest has no paravirtualization), the firmware, the Main network's NICs, the first-boot seed;
and whether the host may run it at all (its class exists, it fits the class's sizing policy,
this host's node meets its selectors)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

from diskferry.control.host.machines import MachineDisk, MachineSpec, Seed
from diskferry.control.host.node import node_fields, node_labels
from diskferry.control.reconcilers.vms.vmclass import class_of
from diskferry.control.reconcilers.vms.vmsizing import core_fraction, sizing_problem
from diskferry.control.reconcilers.vms.vmstatus import resources, topology
from diskferry.control.resources.core import Secret
from diskferry.control.resources.model import Reason
from diskferry.control.resources.virtualmachine import (
    CLASS_READY,
    SIZING,
    NetworkType,
    OsType,
    ProvisioningType,
    VirtualMachine,
)
from diskferry.control.resources.virtualmachineclass import CpuType, VirtualMachineClass
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.phases import Condition

BASELINE_CPU = "qemu64"
"""The model a Features class adds its features to, as Deckhouse's generic model."""
USER_DATA_KEYS = ("userData", "userdata")
"""The keys of a Secret that hold cloud-init user data, Deckhouse's and KubeVirt's."""
CLASS_NOT_FOUND = Reason("VirtualMachineClassNotFound")
SIZING_NOT_MATCHED = Reason("SizingPolicyNotMatched")
UNSCHEDULABLE = Reason("Unschedulable")


def seed_of(client: Client, vm: VirtualMachine) -> Seed | str | None:
    """What the VM's first-boot CD-ROM holds: a NoCloud seed (user-data, meta-data), or a
    Secret's Windows answer files; why it must wait; None without provisioning."""
    provisioning = vm.spec.provisioning
    if provisioning is None:
        return None
    ref = provisioning.user_data_ref or provisioning.sysprep_ref
    secret = None
    if ref is not None:
        secret = client.get(Secret, vm.metadata.namespace, ref.name)
        if secret is None:
            return f"waiting for the Secret {ref.name} of spec.provisioning: it does not exist"
    if provisioning.type is ProvisioningType.SYSPREP_REF:
        assert secret is not None
        data = secret.folded().data
        return Seed("sysprep", {key: secret.value(key) or b"" for key in sorted(data)})
    if secret is not None:
        user_data = next((v for k in USER_DATA_KEYS if (v := secret.value(k)) is not None), None)
        if user_data is None:
            name = secret.metadata.name
            return f"waiting for the Secret {name} of spec.provisioning to hold userData"
    else:
        user_data = (provisioning.user_data or "").encode()
    meta = f"instance-id: {vm.metadata.uid}\nlocal-hostname: {vm.metadata.name}\n"
    return Seed("cidata", {"user-data": user_data, "meta-data": meta.encode()})


@dataclass(frozen=True)
class Hold:
    """Why the VM may not start: the Ready condition's reason and message, and the other
    conditions that say so."""

    reason: str
    message: str
    conditions: dict[str, tuple[bool, str, str] | None]


@dataclass(frozen=True)
class Admitted:
    """A VM the host may run, and its class (None when it has none)."""

    vm_class: VirtualMachineClass | None

    def core_fraction(self, vm: VirtualMachine) -> int:
        """The percent of each core the VM gets."""
        return core_fraction(vm, self.vm_class)

    def resources(self, vm: VirtualMachine) -> dict[str, object]:
        """The resources the VM runs with: its cores at its fraction, its memory."""
        return resources(vm.spec.cpu.cores, self.core_fraction(vm), vm.spec.memory.size)


def admit(client: Client, vm: VirtualMachine) -> Admitted | Hold:
    """Whether the host may run `vm`, as Deckhouse's controller decides it before a start."""
    found = class_of(client, vm)
    if isinstance(found, str):
        return Hold(CLASS_NOT_FOUND, found, {CLASS_READY: (False, "NotFound", found)})
    class_ready = None if found is None else (True, CLASS_READY, "")
    problem = sizing_problem(vm, found)
    if problem is not None:
        conditions = {CLASS_READY: class_ready, SIZING: (False, SIZING_NOT_MATCHED, problem)}
        return Hold(SIZING_NOT_MATCHED, problem, conditions)
    placed = _unplaced(vm, found)
    if placed is not None:
        return Hold(UNSCHEDULABLE, placed, {CLASS_READY: class_ready, SIZING: None})
    return Admitted(found)


def _unplaced(vm: VirtualMachine, vm_class: VirtualMachineClass | None) -> str | None:
    """Why this host's node is not one the VM may run on, None when it is."""
    labels = node_labels()
    if any(labels.get(k) != v for k, v in vm.spec.node_selector.items()):
        return "this host's node does not meet the VM's spec.nodeSelector"
    node_affinity = vm.spec.affinity.node_affinity if vm.spec.affinity else None
    required = node_affinity.required if node_affinity else None
    if required is not None and not required.matches(labels, node_fields()):
        return (
            "this host's node does not meet the VM's "
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        )
    selector = vm_class.spec.node_selector if vm_class else None
    if selector is not None and not selector.matches(labels):
        name = vm_class.metadata.name if vm_class else ""
        return (
            f"this host's node does not meet the spec.nodeSelector of VirtualMachineClass {name}: "
            "name another class in spec.virtualMachineClassName"
        )
    return None


def cpu_model(vm_class: VirtualMachineClass | None) -> str | None:
    """`-cpu` for the class: its model, the baseline with its features, or None (the host's
    CPU, which is also what Discovery finds on the one host)."""
    if vm_class is None:
        return None
    cpu = vm_class.spec.cpu
    if cpu.type is CpuType.MODEL:
        return cpu.model
    if cpu.type is CpuType.FEATURES:
        return ",".join([BASELINE_CPU, *(f"+{f}" for f in cpu.features or [])])
    return None


def mac_address(vm: VirtualMachine, index: int) -> str:
    """The MAC address of the VM's `index`th interface: locally administered, from its uid."""
    digest = hashlib.sha256(f"{vm.metadata.uid}/{index}".encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, *digest[:5]))


def main_networks(vm: VirtualMachine) -> list[int]:
    """The indexes of the VM's interfaces on the Main network, the one this host gives."""
    return [i for i, n in enumerate(vm.spec.networks) if n.type is NetworkType.MAIN]


def network_status(vm: VirtualMachine) -> tuple[list[dict[str, object]], Condition | None]:
    """`status.networks` (the Main network's interfaces, their MACs) and the NetworkReady
    condition (False when the VM asks for networks this host has not; None otherwise)."""
    shown: list[dict[str, object]] = [
        {"type": NetworkType.MAIN.value, "macAddress": mac_address(vm, i)}
        for i in main_networks(vm)
    ]
    others = [n.name or n.type.value for n in vm.spec.networks if n.type is not NetworkType.MAIN]
    if not others:
        return shown, None
    message = f"this host has only the Main network: {', '.join(others)} not attached"
    return shown, (False, "NetworkNotSupported", message)


def bus_of(vm: VirtualMachine) -> Literal["virtio", "sata", "ide"]:
    """Where the VM's disks sit: virtio-scsi, else IDE for Legacy guests, SATA otherwise."""
    if vm.spec.enable_paravirtualization:
        return "virtio"
    return "ide" if vm.spec.os_type is OsType.LEGACY else "sata"


def machine_spec(
    vm: VirtualMachine, admitted: Admitted, disks: list[MachineDisk], seed: Seed | None
) -> MachineSpec:
    """What the host's machines start `vm` with: its class's CPU, its cores at their fraction,
    its memory, `disks` on its bus, its firmware, its Main network's NICs, Hyper-V's
    enlightenments for a Windows guest, its guest agent channel and first-boot `seed`."""
    return MachineSpec(
        cores=vm.spec.cpu.cores,
        memory_bytes=vm.spec.memory.size_bytes,
        disks=disks,
        core_fraction=admitted.core_fraction(vm),
        cpu=cpu_model(admitted.vm_class),
        sockets=topology(vm.spec.cpu.cores)["sockets"],
        bus=bus_of(vm),
        bootloader=vm.spec.bootloader,
        nics=[mac_address(vm, i) for i in main_networks(vm)],
        hyperv=vm.spec.os_type is OsType.WINDOWS,
        guest_agent=vm.spec.enable_guest_agent,
        seed=seed,
    )
