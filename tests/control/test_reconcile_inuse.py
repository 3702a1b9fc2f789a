"""Disks and images a running VirtualMachine holds are protected from deletion, as Deckhouse
protects them: each carries its protection finalizer while the VM holds it, a delete leaves it
Terminating (its data kept, the VM running) with an Event naming the VM, and it goes once the
VM stops. Status says who uses it: the InUse condition, and a disk's attachedToVirtualMachines."""

from __future__ import annotations

from typing import Any

from control_support import wait_until
from reconcile_support import Daemon
from vm_support import QUICK_STOP, daemon, patch_vm, ready_disk

from diskferry.control.errors import NotFoundError
from diskferry.control.resources.registry import REGISTRY

__all__ = ["daemon"]
PROTECTION = {
    "VirtualDisk": "diskferry.io/vd-protection",
    "VirtualImage": "diskferry.io/vi-protection",
    "ClusterVirtualImage": "diskferry.io/cvi-protection",
}


def _get(daemon: Daemon, kind: str, name: str) -> dict[str, Any] | None:
    info = REGISTRY.by_kind(kind)
    try:
        return daemon.objects.get(info, "default" if info.namespaced else None, name)
    except NotFoundError:
        return None


def _in_use(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == "InUse"), None)


def _said(daemon: Daemon, name: str, reason: str) -> list[str]:
    """The messages of the Events of `reason` about the object `name`, of any namespace."""
    events = daemon.objects.list(REGISTRY.by_kind("Event"), None).items
    return [
        e["message"]
        for e in events
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def _images_of(daemon: Daemon, disk: str) -> None:
    """The VirtualImage vi-held and the ClusterVirtualImage cvi-held, both of `disk`, Ready."""
    ref = {"kind": "VirtualDisk", "name": disk}
    daemon.apply("VirtualImage", "vi-held", {"dataSource": {"type": "ObjectRef", "objectRef": ref}})
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "ClusterVirtualImage",
        "metadata": {"name": "cvi-held"},
        "spec": {"dataSource": {"type": "ObjectRef", "objectRef": {**ref, "namespace": "default"}}},
    }
    daemon.objects.create(REGISTRY.by_kind("ClusterVirtualImage"), None, body)
    for kind, name in [("VirtualImage", "vi-held"), ("ClusterVirtualImage", "cvi-held")]:
        done = wait_until(
            lambda kind=kind, name=name: (
                (o := _get(daemon, kind, name))
                and o.get("status", {}).get("phase") in ("Ready", "Failed")
                and o
            ),
            120,
        )
        assert done["status"]["phase"] == "Ready", done["status"]


def _vm(daemon: Daemon, name: str, policy: str, refs: list[tuple[str, str]]) -> None:
    devices = [{"kind": kind, "name": device} for kind, device in refs]
    body = {"runPolicy": policy, "blockDeviceRefs": devices, "memory": {"size": "64Mi"}}
    daemon.apply("VirtualMachine", name, {**body, **QUICK_STOP})


def test_what_a_running_vm_holds_waits_to_be_deleted_until_it_stops(daemon: Daemon) -> None:
    claim = ready_disk(daemon, "vd-held")
    ready_disk(daemon, "vd-src")
    _images_of(daemon, "vd-src")
    held = [("VirtualDisk", "vd-held"), ("VirtualImage", "vi-held")]
    held.append(("ClusterVirtualImage", "cvi-held"))
    _vm(daemon, "vm-h", "AlwaysOn", held)
    vm = daemon.wait_phase("VirtualMachine", "vm-h", "Running", "Degraded", timeout=60)
    assert vm["status"]["phase"] == "Running", vm["status"]
    for kind, name in held:
        obj = wait_until(
            lambda kind=kind, name=name: (
                (o := _get(daemon, kind, name))
                and PROTECTION[kind] in o["metadata"]["finalizers"]
                and (_in_use(o) or {}).get("status") == "True"
                and o
            ),
            30,
        )
        in_use = _in_use(obj)
        assert in_use["reason"] == "AttachedToVirtualMachine"
        assert 'vm-h"' in in_use["message"] and "stop the VirtualMachine" in in_use["message"]
    disk = _get(daemon, "VirtualDisk", "vd-held")
    assert disk["status"]["attachedToVirtualMachines"] == [{"name": "vm-h", "mounted": True}]

    for kind, name in held:
        info = REGISTRY.by_kind(kind)
        daemon.objects.delete(info, "default" if info.namespaced else None, name)
    for kind, name in held:
        waiting = wait_until(
            lambda kind=kind, name=name: (
                (o := _get(daemon, kind, name)) and o["status"].get("phase") == "Terminating" and o
            ),
            30,
        )
        assert PROTECTION[kind] in waiting["metadata"]["finalizers"]
        said = wait_until(lambda name=name: _said(daemon, name, "InUse"), 30)
        assert "vm-h" in said[0] and "deletion waits" in said[0], said
    assert claim.exists()
    assert daemon.get("VirtualMachine", "vm-h")["status"]["phase"] == "Running"

    patch_vm(daemon, "vm-h", {"spec": {"runPolicy": "AlwaysOff"}})
    for kind, name in held:
        wait_until(lambda kind=kind, name=name: _get(daemon, kind, name) is None, 60)
    assert not claim.exists()


def test_a_stopped_vm_holds_nothing_back(daemon: Daemon) -> None:
    ready_disk(daemon, "vd-free")
    _vm(daemon, "vm-off", "AlwaysOff", [("VirtualDisk", "vd-free")])
    daemon.wait_phase("VirtualMachine", "vm-off", "Stopped", timeout=30)
    disk = wait_until(
        lambda: (
            (o := daemon.get("VirtualDisk", "vd-free"))
            and o["status"].get("attachedToVirtualMachines")
            and o
        ),
        30,
    )
    assert disk["status"]["attachedToVirtualMachines"] == [{"name": "vm-off", "mounted": False}]
    assert (_in_use(disk)["status"], _in_use(disk)["reason"]) == ("False", "NotInUse")
    assert PROTECTION["VirtualDisk"] not in disk["metadata"]["finalizers"]
    daemon.objects.delete(REGISTRY.by_kind("VirtualDisk"), "default", "vd-free")
    wait_until(lambda: daemon.get("VirtualDisk", "vd-free") is None, 30)
