"""CBT of a VirtualMachine's disks: chosen by the DataMoverConfig's selectors or a label,
PendingRestart on a running VM until its next start moves the disks onto their overlays."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from control_support import wait_until
from reconcile_support import Daemon
from vm_support import cbt_state, create_vm, daemon, hmp, patch_vm, ready_disk, vm_daemon

from diskferry.control.resources.registry import REGISTRY
from diskferry.control.runtime.runner.base import JobState
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.qemu.bitmaps import BASE
from diskferry.qemu.qmp import Qmp

__all__ = ["daemon"]

SPEC = {
    "runPolicy": "AlwaysOn",
    "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd-e"}],
    "memory": {"size": "64Mi"},
}


def select_app_web(daemon: Daemon) -> None:
    """The default DataMoverConfig, selecting the VMs labelled app=web for CBT."""
    selectors = {"virtualMachineLabelSelector": {"matchLabels": {"app": "web"}}}
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "DataMoverConfig",
        "metadata": {"name": "default"},
        "spec": {"changedBlockTrackingLabelSelectors": selectors},
    }
    daemon.objects.create(REGISTRY.by_kind("DataMoverConfig"), None, body)


def test_selector_on_a_running_vm_waits_for_the_restart(daemon: Daemon) -> None:
    disk = ready_disk(daemon, "vd-e")
    create_vm(daemon, "vm-e", SPEC, {"app": "web"})
    daemon.wait_phase("VirtualMachine", "vm-e", "Running", timeout=30)
    assert cbt_state(daemon, "vm-e") == "Disabled"

    select_app_web(daemon)
    wait_until(lambda: cbt_state(daemon, "vm-e") == "PendingRestart", 30)
    assert not os.path.exists(f"{disk}.cbt.qcow2")

    patch_vm(daemon, "vm-e", {"spec": {"runPolicy": "AlwaysOff"}})
    daemon.wait_phase("VirtualMachine", "vm-e", "Stopped", timeout=30)
    patch_vm(daemon, "vm-e", {"spec": {"runPolicy": "AlwaysOn"}})
    vm = daemon.wait_phase("VirtualMachine", "vm-e", "Running", timeout=30)
    assert vm["status"]["changedBlockTracking"] == {"state": "Enabled"}
    socket = vm["status"]["qmpSocket"]
    target = vm["status"]["blockDevices"][0]["target"]
    hmp(socket, f'qemu-io -d {target} "write -P 0x33 2M 64k"')
    with Qmp(socket) as qmp:
        nodes = {n["node-name"]: n for n in qmp.command("query-named-block-nodes", flat=True)}
    node = nodes[target]
    assert node["drv"] == "qcow2"
    assert node["file"] == f"{disk}.cbt.qcow2"
    base = next(b for b in node["dirty-bitmaps"] if b["name"] == BASE)
    assert base["persistent"] and base["count"] == 65536
    with disk.open("rb") as f:
        f.seek(2 << 20)
        assert f.read(65536) == b"\x33" * 65536


def test_label_on_a_stopped_vm_enables_cbt_at_once_by_a_worker(daemon: Daemon, caplog) -> None:
    """A stopped VM labelled for CBT gets its overlays without being started, a worker's CBT
    job making them."""
    caplog.set_level(logging.INFO, logger="diskferry.control")
    disk = ready_disk(daemon, "vd-e")
    stopped = {**SPEC, "runPolicy": "AlwaysOff"}
    create_vm(daemon, "vm-f", stopped, {"diskferry.io/changed-block-tracking": "true"})
    daemon.wait_phase("VirtualMachine", "vm-f", "Stopped", timeout=30)
    wait_until(lambda: cbt_state(daemon, "vm-f") == "Enabled", 30)
    assert stat.S_IMODE(os.stat(f"{disk}.cbt.qcow2").st_mode) == 0o600  # as its disk
    said = [r.getMessage() for r in caplog.records]
    assert any(
        s.startswith("VirtualMachine default/vm-f: ") and "cbtEnable done" in s for s in said
    )
    vms, disks = REGISTRY.by_kind("VirtualMachine"), REGISTRY.by_kind("VirtualDisk")
    daemon.objects.delete(vms, "default", "vm-f")
    daemon.objects.delete(disks, "default", "vd-e")
    wait_until(lambda: daemon.get("VirtualDisk", "vd-e") is None, 30)
    assert not os.path.exists(f"{disk}.cbt.qcow2")  # the disk's overlay goes with it
    assert not disk.parent.exists()


class LingeringRunner(LocalRunner):
    """This host's runner, whose CBT jobs seem to run on after they ended (as one does between
    putting its overlay in place and writing its result) until `let_end`."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.lingering = True
        self.looks_after_end = 0

    def state(self, job_id: str) -> JobState | None:
        state = super().state(job_id)
        if self.lingering and job_id.startswith("vm-cbt-") and state and not state.running:
            self.looks_after_end += 1
            return dataclasses.replace(state, running=True, result=None, exit_code=None)
        return state

    def let_end(self) -> None:
        self.lingering = False


@contextlib.contextmanager
def lingering_daemon() -> Iterator[tuple[Daemon, LingeringRunner]]:
    """A VM daemon whose workers run through a LingeringRunner, and that runner."""
    runners: list[LingeringRunner] = []

    def lingering(data_dir: Path) -> LingeringRunner:
        runners.append(LingeringRunner(data_dir))
        return runners[0]

    with vm_daemon(lingering) as daemon:
        yield daemon, runners[0]


def test_a_cbt_job_whose_overlay_is_in_place_is_let_finish_and_its_log_kept(caplog) -> None:
    """A reconcile that finds the overlay in place while the job that made it still runs waits
    for that job, neither cancelling it nor dropping its log, and shows Enabled only after."""
    caplog.set_level(logging.INFO, logger="diskferry.control")
    with lingering_daemon() as (daemon, runner):
        disk = ready_disk(daemon, "vd-e")
        stopped = {**SPEC, "runPolicy": "AlwaysOff"}
        create_vm(daemon, "vm-h", stopped, {"diskferry.io/changed-block-tracking": "true"})
        wait_until(lambda: os.path.exists(f"{disk}.cbt.qcow2"), 30)
        wait_until(lambda: runner.looks_after_end >= 3, 30)  # reconciled meanwhile
        assert cbt_state(daemon, "vm-h") == "Initializing"
        runner.let_end()
        wait_until(lambda: cbt_state(daemon, "vm-h") == "Enabled", 30)
        said = [r.getMessage() for r in caplog.records]
        assert any(
            s.startswith("VirtualMachine default/vm-h: ") and "cbtEnable done" in s for s in said
        )


def test_a_vm_starts_only_once_a_cbt_job_no_longer_wanted_is_undone() -> None:
    """CBT unwanted while the job moving a starting VM's disk onto its overlay runs: the disk is
    moved back off it before QEMU starts, so that no write goes past a bitmap that stays."""
    with lingering_daemon() as (daemon, runner):
        disk = ready_disk(daemon, "vd-e")
        create_vm(daemon, "vm-i", SPEC, {"diskferry.io/changed-block-tracking": "true"})
        wait_until(lambda: os.path.exists(f"{disk}.cbt.qcow2"), 30)
        patch_vm(daemon, "vm-i", {"metadata": {"labels": None}})
        seen = runner.looks_after_end
        wait_until(lambda: runner.looks_after_end >= seen + 3, 30)  # reconciled since
        runner.let_end()
        vm = daemon.wait_phase("VirtualMachine", "vm-i", "Running", timeout=60)
        assert not os.path.exists(f"{disk}.cbt.qcow2")
        assert vm["status"]["changedBlockTracking"] == {"state": "Disabled"}
        target = vm["status"]["blockDevices"][0]["target"]
        with Qmp(vm["status"]["qmpSocket"]) as qmp:
            nodes = {n["node-name"]: n for n in qmp.command("query-named-block-nodes", flat=True)}
        assert nodes[target]["drv"] != "qcow2"


def test_cbt_no_longer_wanted_removes_the_overlays_at_the_next_start(daemon: Daemon) -> None:
    """Dropping the label leaves the running VM tracked; its next start runs it on raw."""
    disk = ready_disk(daemon, "vd-e")
    create_vm(daemon, "vm-g", SPEC, {"diskferry.io/changed-block-tracking": "true"})
    daemon.wait_phase("VirtualMachine", "vm-g", "Running", timeout=30)
    wait_until(lambda: cbt_state(daemon, "vm-g") == "Enabled", 30)
    patch_vm(daemon, "vm-g", {"metadata": {"labels": None}})
    patch_vm(daemon, "vm-g", {"spec": {"runPolicy": "AlwaysOff"}})
    wait_until(lambda: cbt_state(daemon, "vm-g") == "Disabled", 30)
    assert not os.path.exists(f"{disk}.cbt.qcow2")


def diskferry(*args: str) -> dict:
    """Run a diskferry command with --json; its result."""
    env = {**os.environ, "DISKFERRY_PASSWORD": "vm-test-pass"}
    command = [sys.executable, "-m", "diskferry.cli.main", *args, "--json"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_running_vm_is_backed_up_live_through_its_status(daemon: Daemon) -> None:
    """status.qmpSocket and the disk's overlay are all `backup --qmp` needs: a full backup,
    then, after a guest write, an incremental."""
    disk = ready_disk(daemon, "vd-e")
    create_vm(daemon, "vm-h", SPEC, {"diskferry.io/changed-block-tracking": "true"})
    vm = daemon.wait_phase("VirtualMachine", "vm-h", "Running", timeout=30)
    wait_until(lambda: cbt_state(daemon, "vm-h") == "Enabled", 30)
    socket, target = vm["status"]["qmpSocket"], vm["status"]["blockDevices"][0]["target"]
    repo = str(daemon.data_dir / "repo")
    diskferry("repo", "init", "--repo", repo)
    backup = ["backup", "--repo", repo, "--vm", "vm-h", "--qmp", socket, "--no-progress"]
    backup += ["--disk", f"root={disk}.cbt.qcow2"]
    assert diskferry(*backup)["disks"][0]["type"] == "full"
    hmp(socket, f'qemu-io -d {target} "write -P 0x44 4M 64k"')
    incremental = diskferry(*backup)["disks"][0]
    assert incremental["type"] == "incremental"
    assert incremental["bytesRead"] == 65536


def test_a_namespace_selector_selects_the_vms_in_labelled_namespaces(daemon: Daemon) -> None:
    disk = ready_disk(daemon, "vd-e")
    namespaces = REGISTRY.by_kind("Namespace")
    daemon.objects.patch(namespaces, None, "default", {"metadata": {"labels": {"t": "p"}}}, "merge")
    selector = {"matchExpressions": [{"key": "t", "operator": "In", "values": ["p", "q"]}]}
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "DataMoverConfig",
        "metadata": {"name": "default"},
        "spec": {"changedBlockTrackingLabelSelectors": {"namespaceLabelSelector": selector}},
    }
    daemon.objects.create(REGISTRY.by_kind("DataMoverConfig"), None, body)
    create_vm(daemon, "vm-n", {**SPEC, "runPolicy": "AlwaysOff"}, {})
    wait_until(lambda: cbt_state(daemon, "vm-n") == "Enabled", 30)
    assert os.path.exists(f"{disk}.cbt.qcow2")
