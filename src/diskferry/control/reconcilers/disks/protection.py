"""A disk or an image a VirtualMachine holds is protected from deletion, as Deckhouse protects
it: its protection finalizer (Deckhouse's vd-, vi- and cvi-protection, in diskferry.io) is on
while a VM holds it and off once none does, so that a delete leaves it Terminating, its data
kept and the VM running, until the VM stops. Its status says who uses it: the InUse
condition (True, AttachedToVirtualMachine, naming the VMs; else False, NotInUse) and, for a
disk, `attachedToVirtualMachines` (every VM that names it, `mounted` when it holds it); a
deletion that waits is an Event naming the VMs it waits for."""

from __future__ import annotations

from typing import Any, TypeVar

from diskferry.control.reconcilers.disks.inuse import holds_disks, users
from diskferry.control.resources.model import IN_USE, Resource
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import set_condition
from diskferry.control.runtime.finalizer import deleting, held, release
from diskferry.control.runtime.phases import (
    STILL_IN_USE,
    TERMINATING,
    status_of,
    transition,
    update_fields,
)
from diskferry.control.runtime.reconciler import Result

M = TypeVar("M", bound=Resource)
FINALIZERS = {
    "VirtualDisk": "diskferry.io/vd-protection",
    "VirtualImage": "diskferry.io/vi-protection",
    "ClusterVirtualImage": "diskferry.io/cvi-protection",
}
ATTACHED = "AttachedToVirtualMachine"
NOT_IN_USE = "NotInUse"
HELD_POLL = 2.0


def _shown(obj: Resource, vm: VirtualMachine) -> str:
    """How a message names the VM: by name, with its namespace for a cluster image's."""
    name = vm.metadata.name or ""
    return name if obj.metadata.namespace else f"{vm.metadata.namespace}/{name}"


def _by(obj: Resource, vms: list[VirtualMachine]) -> str:
    """'the VirtualMachine "a"' or 'the VirtualMachines "a", "b"'."""
    listed = ", ".join(f'"{_shown(obj, vm)}"' for vm in vms)
    return f"the VirtualMachine{'s' if len(vms) > 1 else ''} {listed}"


def in_use_message(obj: Resource, vms: list[VirtualMachine]) -> str:
    """Who holds the object, and what releases it."""
    stop = f"the VirtualMachine{'s' if len(vms) > 1 else ''}"
    return f"The {obj.kind} is in use by {_by(obj, vms)}; stop {stop} to release the {obj.kind}."


def protect(client: Client, obj: M) -> tuple[M, list[VirtualMachine]]:
    """The object with its protection finalizer on while a VM holds it (none is added to an
    object being deleted) and off once none does, and its status saying who uses it; the VMs
    that hold it."""
    named = users(client, obj)
    holding = [vm for vm in named if holds_disks(vm)]
    finalizer = FINALIZERS[obj.kind]
    if holding and not deleting(obj):
        obj = held(client, obj, finalizer)
    elif not holding:
        obj = release(client, obj, finalizer)
    conditions = status_of(obj).get("conditions") or []
    if holding:
        message = in_use_message(obj, holding)
        conditions = set_condition(obj, conditions, IN_USE, True, ATTACHED, message)
    else:
        conditions = set_condition(obj, conditions, IN_USE, False, NOT_IN_USE)
    fields: dict[str, Any] = {"conditions": conditions}
    if isinstance(obj, VirtualDisk):
        attached = [{"name": vm.metadata.name, "mounted": holds_disks(vm)} for vm in named]
        fields["attachedToVirtualMachines"] = attached or None
    return update_fields(client, obj, fields), holding


def hold_back(client: Client, obj: Resource, vms: list[VirtualMachine]) -> Result:
    """One step of deleting an object the VMs `vms` hold: Terminating, with an Event saying
    what it waits for; nothing of it is removed. A look again later, besides the one each
    change of those VMs brings."""
    message = (
        f"The {obj.kind} is in use by {_by(obj, vms)}; its deletion waits until "
        f"{'they stop' if len(vms) > 1 else 'it stops'}."
    )
    transition(client, obj, TERMINATING, STILL_IN_USE, message)
    return Result.requeue(HELD_POLL)
