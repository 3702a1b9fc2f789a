"""What the end-to-end backup tests share: a daemon whose VMs are real QEMUs in any namespace,
storage locations on a directory or on moto's S3 server, VM manifests, guest writes, and a
log of every watch event in order."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from backup_restore_support import apply
from control_support import stop_workers_under, workers_under
from datamover_support import CREDENTIALS, PASSWORD, filesystem_bsl, s3_bsl, secret
from reconcile_support import Daemon
from vm_support import hmp

from diskferry.base import procstat
from diskferry.control.resources.model import API_VERSION
from diskferry.qemu import cbt

CBT_LABELS = {"app": "web", "diskferry.io/changed-block-tracking": "true"}
PLAIN_LABELS = {"app": "web"}


def kill_vms(data_dir: Path) -> None:
    """SIGKILL every QEMU the daemon over `data_dir` recorded, in every namespace."""
    for state in data_dir.glob("vms/*/*/state.json"):
        try:
            pid = json.loads(state.read_text())["pid"]
        except (OSError, ValueError, KeyError):
            continue
        if pid and procstat.start_time(pid) is not None:
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def short_base(monkeypatch) -> Iterator[Path]:
    """A directory short enough for Unix socket paths; its VMs and workers end with the test."""
    path = Path(tempfile.mkdtemp(prefix="dfe2", dir="/tmp"))
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(path / "cache"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    yield path
    kill_vms(path / "data")
    stop_workers_under(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def vm_daemon(short_base: Path) -> Iterator[Daemon]:
    """The controllers over `short_base`/data, stopped after the test."""
    daemon = Daemon(short_base / "data")
    yield daemon
    daemon.stop()
    kill_vms(daemon.data_dir)


def directory_location(daemon: Daemon, directory: Path) -> None:
    """The BackupStorageLocation `repo` in `directory`."""
    secret(daemon, "repo-pass", password=PASSWORD)
    daemon.apply("BackupStorageLocation", "repo", filesystem_bsl(directory))


def s3_location(daemon: Daemon, endpoint: str, bucket: str) -> None:
    """The BackupStorageLocation `repo` on the S3 server at `endpoint`, under a fresh prefix."""
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud=CREDENTIALS)
    daemon.apply("BackupStorageLocation", "repo", s3_bsl(endpoint, bucket, uuid.uuid4().hex))


def mover_config(daemon: Daemon, **spec: Any) -> None:
    """The DataMoverConfig `default`."""
    body = {"kind": "DataMoverConfig", "metadata": {"name": "default"}, "spec": spec}
    apply(daemon, [{"apiVersion": API_VERSION, **body}])


def vm_manifest(name: str, policy: str, disks: list[str], labels: dict[str, str]) -> dict:
    """A small VirtualMachine in default on the VirtualDisks `disks`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "runPolicy": policy,
            "blockDeviceRefs": [{"kind": "VirtualDisk", "name": d} for d in disks],
            "memory": {"size": "64Mi"},
            "terminationGracePeriodSeconds": 0,  # no guest OS to power off on an ACPI request
        },
    }


def backup_manifest(name: str) -> dict:
    """A Backup of the VMs labelled app=web in default, to the location `repo`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Backup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "includedNamespaces": ["default"],
            "labelSelector": {"matchLabels": {"app": "web"}},
            "storageLocation": "repo",
        },
    }


def restore_manifest(name: str, backup: str, namespace: str) -> dict:
    """A Restore of `backup` with default mapped to `namespace`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Restore",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"backupName": backup, "namespaceMapping": {"default": namespace}},
    }


def guest_write(socket: str, target: str, command: str) -> None:
    """Write as the running guest would: qemu-io on the VM's disk node through its monitor."""
    said = hmp(socket, f'qemu-io -d {target} "{command}"')
    assert "error" not in said.lower(), said


def offline_write(claim: Path, command: str) -> None:
    """Write to a stopped VM's tracked disk through its CBT overlay, so its bitmap sees it."""
    overlay = cbt.overlay_path(str(claim))
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", command, overlay], check=True)


@dataclass(frozen=True)
class Seen:
    """One watch event: its type, and the object as it was then."""

    type: str
    object: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.object.get("kind", "")

    @property
    def name(self) -> str:
        return self.object["metadata"]["name"]

    @property
    def phase(self) -> str | None:
        return (self.object.get("status") or {}).get("phase")


class EventLog:
    """Every watch event of the store feed (all kinds, all namespaces) in order, from now on,
    as `kubectl get -w` over the API gets them."""

    def __init__(self, daemon: Daemon) -> None:
        self.watch = daemon.objects.watch(
            None, None, resource_version=daemon.objects.resource_version()
        )
        self.seen: list[Seen] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stop.is_set():
            for event in self.watch.next(0.2):
                if event.type != "BOOKMARK":
                    self.seen.append(Seen(event.type, event.object))

    def of(self, kind: str, namespace: str | None = None) -> list[Seen]:
        """The events of `kind` (in `namespace` when given), in order."""
        return [
            s
            for s in list(self.seen)
            if s.kind == kind
            and (namespace is None or s.object["metadata"].get("namespace") == namespace)
        ]

    def most_at_once(self, kind: str, phase: str) -> int:
        """The largest number of objects of `kind` in `phase` at once, as the events said."""
        phases: dict[tuple[str, str], str | None] = {}
        most = 0
        for s in self.of(kind):
            key = (s.object["metadata"].get("namespace", ""), s.name)
            phases[key] = None if s.type == "DELETED" else s.phase
            most = max(most, sum(1 for p in phases.values() if p == phase))
        return most

    def first(self, what: Callable[[Seen], bool]) -> int:
        """The position of the first event that `what` holds for; -1 when there is none."""
        return next((i for i, s in enumerate(list(self.seen)) if what(s)), -1)

    def reached(self, kind: str, name: str, phase: str) -> int:
        """The position of the first event with the object `kind`/`name` in `phase`."""
        return self.first(lambda s: s.kind == kind and s.name == name and s.phase == phase)

    def phases(self, kind: str) -> list[str | None]:
        """The last phase each object of `kind` was seen in, in order of names."""
        last = {s.name: s.phase for s in self.of(kind)}
        return [last[n] for n in sorted(last)]

    def stop(self) -> None:
        """Stop following."""
        self._stop.set()
        self._thread.join(5)


def worker_pids(data_dir: Path, module: str, job: str = "") -> list[int]:
    """The processes running `python -m <module>` from a job directory of `data_dir` (one
    whose id starts with `job`)."""
    found = []
    for pid in workers_under(data_dir / "jobs"):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            directory = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        if module.encode() in cmdline.split(b"\0") and directory.name.startswith(job):
            found.append(pid)
    return found
