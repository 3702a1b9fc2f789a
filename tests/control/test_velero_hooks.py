"""Velero's hooks run in a running VM's guest through its agent (a real qemu-ga, jailed on a
loop image). A Backup's hooks that apply to the VM (its namespace, labels, resources) run pre
and post, counted in the Backup's hookStatus; one that fails with onError Continue is a
warning, one with Fail fails the VM's backup; a hook for pods applies to no VM. A Restore's
exec hooks run in the restored VM once it runs, counted in its hookStatus."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from backup_e2e_support import CBT_LABELS, directory_location, short_base, vm_daemon, vm_manifest
from backup_restore_support import apply, disk_file, get, wait_for
from control_support import wait_until
from reconcile_support import Daemon
from vm_support import cbt_state

from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.host.machines import Sockets
from diskferry.control.resources.virtualmachine import VirtualMachine

sys.path.insert(0, str(Path(__file__).parent.parent / "qemu"))

from guest_agent import GuestAgent, jailed_agent

__all__ = ["short_base", "vm_daemon"]
ENDED = ("Completed", "PartiallyFailed", "Failed")


def exec_hook(*command: str, **fields: Any) -> dict[str, Any]:
    return {"exec": {"command": list(command), **fields}}


def backup(name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"storageLocation": "repo", "hooks": {"resources": list(hooks)}},
    }


@pytest.fixture
def guest(short_base: Path, monkeypatch) -> Any:
    """A jailed qemu-ga, the guest agent the daemon finds for every VM."""
    (short_base / "guest").mkdir()
    with jailed_agent(short_base / "guest") as agent:
        found: GuestAgent = agent

        own = QemuMachines.sockets

        def sockets(machines: QemuMachines, vm: VirtualMachine) -> Sockets:
            return Sockets(own(machines, vm).qmp, found.socket)

        monkeypatch.setattr(QemuMachines, "sockets", sockets)
        yield found


def running_vm(daemon: Daemon, base: Path) -> None:
    """The location `repo` in `base`/backups, and the running VM vm1 (app=db) on vd1, with
    CBT and a guest agent."""
    directory_location(daemon, base / "backups")
    daemon.apply("VirtualDisk", "vd1", {"persistentVolumeClaim": {"size": "4Mi"}})
    disk_file(daemon, "default", "vd1")
    machine = vm_manifest("vm1", "AlwaysOn", ["vd1"], {**CBT_LABELS, "app": "db"})
    machine["spec"]["enableGuestAgent"] = True
    apply(daemon, [machine])
    daemon.wait_phase("VirtualMachine", "vm1", "Running", timeout=60)
    wait_until(lambda: cbt_state(daemon, "vm1") == "Enabled", 60)


def test_hooks_run_in_the_guest_around_the_backup(vm_daemon: Daemon, short_base, guest) -> None:
    running_vm(vm_daemon, short_base)

    db = {
        "name": "db",
        "includedNamespaces": ["def*"],
        "labelSelector": {"matchLabels": {"app": "db"}},
        "pre": [exec_hook("/usr/bin/touch", "/pre-ran", timeout="10s")],
        "post": [
            exec_hook("/usr/bin/touch", "/post-ran"),
            exec_hook("/usr/bin/false", onError="Continue"),
        ],
    }
    pods = {"name": "pods", "includedResources": ["pods"], "pre": [exec_hook("/usr/bin/false")]}
    apply(vm_daemon, [backup("b1", db, pods)])
    status = wait_for(vm_daemon, "Backup", "default", "b1", *ENDED)["status"]
    assert status["phase"] == "Completed", status
    assert status["hookStatus"] == {"hooksAttempted": 3, "hooksFailed": 1}
    assert status["warnings"] == 1
    assert (guest.root / "pre-ran").exists() and (guest.root / "post-ran").exists()
    [volume] = status["volumes"]
    upload = get(vm_daemon, "DataUpload", "default", volume["dataUpload"])["status"]
    assert [(h["name"], h["phase"], h["failed"]) for h in upload["hooks"]] == [
        ("db", "pre", False),
        ("db", "post", False),
        ("db", "post", True),
    ]

    failing = {"name": "check", "pre": [exec_hook("/usr/bin/false")]}
    apply(vm_daemon, [backup("b2", failing)])
    status = wait_for(vm_daemon, "Backup", "default", "b2", *ENDED)["status"]
    assert status["phase"] == "Failed", status
    assert status["hookStatus"] == {"hooksAttempted": 1, "hooksFailed": 1}
    [volume] = status["volumes"]
    assert "hook check (pre) failed: exited 1" in volume["reason"]


def test_a_restores_hooks_run_in_the_restored_vm_once_it_runs_by_a_worker(
    vm_daemon: Daemon, short_base, guest, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="diskferry.control")
    running_vm(vm_daemon, short_base)
    apply(vm_daemon, [backup("b1")])
    assert wait_for(vm_daemon, "Backup", "default", "b1", *ENDED)["status"]["phase"] == "Completed"
    hooks = {
        "name": "warm",
        "includedNamespaces": ["restored"],
        "postHooks": [
            {"init": {"initContainers": [{"name": "x", "image": "alpine"}]}},
            exec_hook("/usr/bin/touch", "/restored-ran", waitTimeout="2m", execTimeout="10s"),
            exec_hook("/usr/bin/false"),
        ],
    }
    elsewhere = {
        "name": "elsewhere",
        "includedNamespaces": ["other"],
        "postHooks": [exec_hook("/usr/bin/touch", "/elsewhere-ran")],
    }
    restore = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "Restore",
        "metadata": {"name": "r1", "namespace": "default"},
        "spec": {
            "backupName": "b1",
            "namespaceMapping": {"default": "restored"},
            "hooks": {"resources": [hooks, elsewhere]},
        },
    }
    apply(vm_daemon, [restore])
    status = wait_for(vm_daemon, "Restore", "default", "r1", *ENDED)["status"]
    assert status["phase"] == "Completed", status
    assert status["hookStatus"] == {"hooksAttempted": 2, "hooksFailed": 1}
    assert status["warnings"] == 1
    [machine] = status["virtualMachines"]
    assert [(r["name"], r["failed"]) for r in machine["hookRuns"]] == [
        ("warm", False),
        ("warm", True),
    ]
    assert (guest.root / "restored-ran").exists()
    assert not (guest.root / "elsewhere-ran").exists()
    said = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("Restore default/r1: ") and "hooks done" in line for line in said)
    assert get(vm_daemon, "VirtualMachine", "restored", "vm1")["status"]["phase"] == "Running"
