"""What the VirtualMachineBackup tests share: a daemon on a short data directory with its own
proxy port and a filesystem backup location, a running CBT VM with guest writes, and the
backups and trackers made through the store."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import stop_workers_under, wait_until
from datamover_support import PASSWORD, filesystem_bsl, secret
from vm_support import cbt_state, create_vm, hmp, pid_of, procstat_kill, ready_disk
from vmexport_support import ExportDaemon

from diskferry.control.host.servers import free_port
from diskferry.control.resources.model import API_VERSION

__all__ = ["PASSWORD"]
CBT = {"diskferry.io/changed-block-tracking": "true"}
ENDED = ("Complete", "Failed")


@pytest.fixture
def daemon() -> Iterator[ExportDaemon]:
    """A daemon over a data directory short enough for Unix socket paths under it."""
    base = Path(tempfile.mkdtemp(prefix="dfvmb", dir="/tmp"))
    served = ExportDaemon(base / "d", free_port())
    try:
        yield served
    finally:
        info = served.registry.by_kind("VirtualMachine")
        for vm in served.objects.list(info, "default").items:
            qemu_pid = pid_of(served, vm["metadata"]["name"])
            if qemu_pid:
                procstat_kill(qemu_pid)
        served.stop()
        stop_workers_under(base)
        shutil.rmtree(base, ignore_errors=True)


def location(daemon: ExportDaemon) -> Path:
    """The Available filesystem location `repo` in DATA_DIR/../backups; its directory."""
    directory = daemon.data_dir.parent / "backups"
    secret(daemon, "repo-pass", password=PASSWORD)
    daemon.apply("BackupStorageLocation", "repo", filesystem_bsl(directory))
    daemon.wait_phase("BackupStorageLocation", "repo", "Available", timeout=60)
    return directory


def running_vm(daemon: ExportDaemon, name: str, disk: str) -> tuple[Path, dict[str, Any]]:
    """A running VM on one CBT VirtualDisk `disk`; the disk's file and the VM's status."""
    path = ready_disk(daemon, disk)
    spec = {
        "runPolicy": "AlwaysOn",
        "blockDeviceRefs": [{"kind": "VirtualDisk", "name": disk}],
        "memory": {"size": "64Mi"},
    }
    create_vm(daemon, name, spec, CBT)
    wait_until(lambda: cbt_state(daemon, name) == "Enabled", 60)
    vm = daemon.wait_phase("VirtualMachine", name, "Running", timeout=60)
    return path, vm["status"]


def guest_write(status: dict[str, Any], pattern: int, offset: str, length: str) -> None:
    """Write `pattern` through the running VM's disk, as its guest would."""
    target = status["blockDevices"][0]["target"]
    hmp(status["qmpSocket"], f'qemu-io -d {target} "write -P {pattern:#x} {offset} {length}"')


def create(daemon: ExportDaemon, kind: str, name: str, spec: dict[str, Any]) -> None:
    """An object of `kind` in the default namespace."""
    body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
    daemon.objects.create(daemon.registry.by_kind(kind), "default", body)


def tracker(daemon: ExportDaemon, name: str, vm: str) -> None:
    """A VirtualMachineBackupTracker of `vm`."""
    create(
        daemon,
        "VirtualMachineBackupTracker",
        name,
        {"source": {"kind": "VirtualMachine", "name": vm}},
    )


def backup(daemon: ExportDaemon, name: str, source: dict[str, str], **spec: Any) -> None:
    """A VirtualMachineBackup of `source`."""
    create(daemon, "VirtualMachineBackup", name, {"source": source, **spec})


def through(name: str) -> dict[str, str]:
    """A backup source naming the tracker `name`."""
    return {"kind": "VirtualMachineBackupTracker", "name": name}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The status condition of `kind`."""
    found = obj.get("status", {}).get("conditions") or []
    return next((c for c in found if c["type"] == kind), None)
