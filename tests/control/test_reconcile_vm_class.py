"""VirtualMachines of a VirtualMachineClass, as Deckhouse runs them: the `generic` class is there
from the start, a VM's sizes are checked against its class's sizing policies, and a running VM
says which resources it runs with and on which node."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from reconcile_support import Daemon
from vm_support import create_vm, daemon, pid_of, ready_disk

from diskferry.control.resources.registry import REGISTRY

__all__ = ["daemon"]
CLASSES = REGISTRY.by_kind("VirtualMachineClass")


def condition(vm: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The VM's condition of `kind`."""
    return next((c for c in vm["status"].get("conditions", []) if c["type"] == kind), None)


def spec(disk: str, **more: Any) -> dict[str, Any]:
    """A small VM on `disk` of the generic class."""
    body = {
        "virtualMachineClassName": "generic",
        "runPolicy": "AlwaysOn",
        "blockDeviceRefs": [{"kind": "VirtualDisk", "name": disk}],
        "memory": {"size": "64Mi"},
        "terminationGracePeriodSeconds": 0,
    }
    return {**body, **more}


def test_the_generic_class_is_there_and_ready(daemon: Daemon) -> None:
    found = daemon.objects.get(CLASSES, None, "generic")
    assert found["spec"]["cpu"] == {"type": "Model", "model": "Nehalem"}
    assert found["spec"]["sizingPolicies"][0]["cores"] == {"min": 1, "max": 4}
    ready = daemon.wait_phase_of(CLASSES, "generic", "Ready")
    assert ready["status"]["availableNodes"] == [socket.gethostname().lower()]


def test_a_vm_of_the_class_runs_with_the_resources_it_asked_for(daemon: Daemon) -> None:
    ready_disk(daemon, "vd-r")
    create_vm(daemon, "vm-r", spec("vd-r", cpu={"cores": 2, "coreFraction": "20%"}), {})
    vm = daemon.wait_phase("VirtualMachine", "vm-r", "Running", "Pending", "Degraded", timeout=60)
    status = vm["status"]
    assert status["phase"] == "Running", status
    assert status["nodeName"] == socket.gethostname().lower()
    assert status["resources"]["cpu"] == {
        "cores": 2,
        "coreFraction": "20%",
        "requestedCores": "400m",
        "topology": {"sockets": 1, "coresPerSocket": 2},
    }
    assert status["resources"]["memory"] == {"size": "64Mi"}
    assert status["stats"]["lastStartTime"]
    launch = json.loads((daemon.data_dir / "vms/default/vm-r/state.json").read_text())
    argv = launch["argv"]
    assert argv[argv.index("-cpu") + 1].split(",")[0] == "Nehalem"


def test_the_class_default_core_fraction_is_taken_when_the_vm_gives_none(daemon: Daemon) -> None:
    policy = {"cores": {"min": 1, "max": 4}, "coreFractions": [25, 50], "defaultCoreFraction": 25}
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualMachineClass",
        "metadata": {"name": "shared"},
        "spec": {"cpu": {"type": "Host"}, "sizingPolicies": [policy]},
    }
    daemon.objects.create(CLASSES, None, body)
    ready_disk(daemon, "vd-d")
    create_vm(daemon, "vm-d", spec("vd-d", virtualMachineClassName="shared"), {})
    vm = daemon.wait_phase("VirtualMachine", "vm-d", "Running", "Pending", "Degraded", timeout=60)
    assert vm["status"]["resources"]["cpu"]["coreFraction"] == "25%", vm["status"]


def test_a_vm_outside_its_class_sizing_policy_stays_pending_naming_the_field(
    daemon: Daemon,
) -> None:
    ready_disk(daemon, "vd-p")
    create_vm(daemon, "vm-p", spec("vd-p", cpu={"cores": 6, "coreFraction": "10%"}), {})
    vm = daemon.wait_phase("VirtualMachine", "vm-p", "Pending", "Running", timeout=60)
    assert vm["status"]["phase"] == "Pending"
    matched = condition(vm, "SizingPolicyMatched")
    assert matched and matched["status"] == "False"
    assert matched["reason"] == "SizingPolicyNotMatched"
    assert "spec.cpu.coreFraction" in matched["message"] and "20%, 50%, 100%" in matched["message"]
    assert not (daemon.data_dir / "vms/default/vm-p/state.json").exists()


def test_a_vm_of_a_class_that_does_not_exist_stays_pending(daemon: Daemon) -> None:
    ready_disk(daemon, "vd-n")
    create_vm(daemon, "vm-n", spec("vd-n", virtualMachineClassName="nowhere"), {})
    vm = daemon.wait_phase("VirtualMachine", "vm-n", "Pending", "Running", timeout=60)
    assert vm["status"]["phase"] == "Pending"
    ready = condition(vm, "Ready")
    assert ready and "VirtualMachineClass nowhere" in ready["message"]
    assert "spec.virtualMachineClassName" in ready["message"]


def test_a_vm_whose_node_selector_this_host_does_not_meet_stays_pending(daemon: Daemon) -> None:
    ready_disk(daemon, "vd-s")
    create_vm(daemon, "vm-s", spec("vd-s", nodeSelector={"disktype": "ssd"}), {})
    vm = daemon.wait_phase("VirtualMachine", "vm-s", "Pending", "Running", timeout=60)
    assert vm["status"]["phase"] == "Pending"
    assert "spec.nodeSelector" in condition(vm, "Ready")["message"]


def cpu_share(pid: int) -> tuple[str, int]:
    """The CPU weight of the cgroup `pid` is in: ("cpu.weight", N) or ("cpu.shares", N)."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        weight = Path(f"/sys/fs/cgroup{path}/cpu.weight")
        if controllers == "" and weight.exists():
            return "cpu.weight", int(weight.read_text())
        if "cpu" in controllers.split(","):
            shares = Path(f"/sys/fs/cgroup/{controllers}{path}/cpu.shares")
            return "cpu.shares", int(shares.read_text())
    raise AssertionError(f"no CPU controller for {pid}")


def test_the_core_fraction_is_the_qemu_cpu_weight(daemon: Daemon) -> None:
    """Two cores at 20%: 0.4 of a plain process's weight (cgroup v2 100, v1 1024)."""
    ready_disk(daemon, "vd-w")
    create_vm(daemon, "vm-w", spec("vd-w", cpu={"cores": 2, "coreFraction": "20%"}), {})
    daemon.wait_phase("VirtualMachine", "vm-w", "Running", timeout=60)
    pid = pid_of(daemon, "vm-w")
    assert pid
    kind, value = cpu_share(pid)
    assert value == {"cpu.weight": 40, "cpu.shares": 410}[kind]
