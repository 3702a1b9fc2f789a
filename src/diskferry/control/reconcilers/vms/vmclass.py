"""VirtualMachineClass: Ready once made, as Deckhouse's classes are, its available node this host's
when its node selector selects it; held Terminating while a VM is of it. The class `generic`,
as Deckhouse's module installs it, is made at each start of the daemon when it is missing; and
the class a VM is of (the one it names, else the default class)."""

from __future__ import annotations

import contextlib
import os

from diskferry.control.errors import AlreadyExistsError
from diskferry.control.host.node import node_labels, node_name
from diskferry.control.resources.model import ObjectMeta
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.resources.virtualmachineclass import (
    GENERIC,
    VIRTUAL_MACHINE_CLASSES,
    ClassCpu,
    ClassPhase,
    CoreRange,
    CpuType,
    SizingPolicy,
    VirtualMachineClass,
    VirtualMachineClassSpec,
)
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting, held, release
from diskferry.control.runtime.phases import STILL_IN_USE, transition
from diskferry.control.runtime.reconciler import Result

IN_USE_SECONDS = 5.0
GENERIC_POLICIES = (
    ((1, 4), (False,), (5, 10, 20, 50, 100)),
    ((5, 8), (False,), (20, 50, 100)),
    ((9, 16), (True, False), (50, 100)),
    ((17, 1024), (True, False), (100,)),
)
"""The sizing policies of Deckhouse's generic class: cores, dedicatedCores, coreFractions."""


def generic_class() -> VirtualMachineClass:
    """The class `generic` as Deckhouse's module installs it: Nehalem, four sizing policies."""
    policies = [
        SizingPolicy.model_validate(
            {
                "cores": CoreRange(min=low, max=high),
                "dedicatedCores": list(dedicated),
                "coreFractions": list(fractions),
            }
        )
        for (low, high), dedicated, fractions in GENERIC_POLICIES
    ]
    return VirtualMachineClass(
        metadata=ObjectMeta(name=GENERIC),
        spec=VirtualMachineClassSpec(
            cpu=ClassCpu(type=CpuType.MODEL, model="Nehalem"), sizingPolicies=policies
        ),
    )


def ensure_generic_class(client: Client) -> None:
    """Make the class `generic` when there is none."""
    if client.get(VirtualMachineClass, None, GENERIC) is not None:
        return
    with contextlib.suppress(AlreadyExistsError):  # made meanwhile
        client.create(generic_class())


def class_of(client: Client, vm: VirtualMachine) -> VirtualMachineClass | str | None:
    """The class of `vm`: the one it names (why not, when that one does not exist), else the
    class annotated as the default, else None."""
    name = vm.spec.virtual_machine_class_name
    if name is None:
        return next((c for c in client.list(VirtualMachineClass) if c.is_default), None)
    found = client.get(VirtualMachineClass, None, name)
    if found is None:
        return (
            f"the VirtualMachineClass {name} does not exist: name an existing class in "
            "spec.virtualMachineClassName"
        )
    return found


def _memory_total() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


class VirtualMachineClassReconciler:
    """Keeps each class Ready, naming this host when its selectors select it."""

    info = VIRTUAL_MACHINE_CLASSES

    def __init__(self, client: Client) -> None:
        self.client = client

    def reconcile(self, obj: VirtualMachineClass) -> Result:
        """Ready with this host's node, or Terminating until no VM is of the class."""
        if deleting(obj):
            users = [
                f"{vm.metadata.namespace}/{vm.metadata.name}"
                for vm in self.client.list(VirtualMachine)
                if vm.spec.virtual_machine_class_name == obj.metadata.name
            ]
            if users:
                message = f"in use by VirtualMachine {', '.join(sorted(users))}"
                transition(self.client, obj, ClassPhase.TERMINATING, STILL_IN_USE, message)
                return Result.requeue(IN_USE_SECONDS)
            release(self.client, obj)
            return Result.done()
        obj = held(self.client, obj)
        selector = obj.spec.node_selector
        selected = selector is None or selector.matches(node_labels())
        most = {"cpu": str(os.cpu_count() or 1), "memory": str(_memory_total())}
        fields = {
            "availableNodes": [node_name()] if selected else [],
            "maxAllocatableResources": most,
        }
        message = (
            "its VMs can run on this host"
            if selected
            else "this host's node does not meet spec.nodeSelector: no VM of the class runs here"
        )
        transition(self.client, obj, ClassPhase.READY, "VirtualMachineClassReady", message, fields)
        return Result.done()
