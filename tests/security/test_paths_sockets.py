"""The sockets the root daemon speaks QMP and the guest-agent protocol to come from what it
decided: a VM's status, which a client may patch, never names them, and a VM that runs
elsewhere names one only inside DATA_DIR/vm-sockets: a socket, not a symlink, owned by root
or the daemon's user. A socket a client names anywhere else is never connected to."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "control"))

from reconcile_support import Daemon
from vm_support import ready_disk

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.clock import Clock
from diskferry.control.host.embedded.certs import PKI_DIR, DaemonCa
from diskferry.control.host.embedded.imagestore import LayoutImageStore
from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.host.embedded.proxy import ProxyKeeper
from diskferry.control.host.embedded.volumes import DirectoryVolumes
from diskferry.control.host.servers import free_port
from diskferry.control.reconcilers.datamover.admission import Scheduler
from diskferry.control.reconcilers.datamover.dataupload import DataUploadReconciler
from diskferry.control.reconcilers.datamover.moverlife import Job
from diskferry.control.reconcilers.kvbackup.vmbackuppull import PullBackup
from diskferry.control.reconcilers.kvbackup.vmbackupstate import Source
from diskferry.control.reconcilers.velero.repoaccess import Location
from diskferry.control.reconcilers.vms.virtualmachine import VirtualMachineReconciler
from diskferry.control.resources.datamoverconfig import DataMoverConfigSpec
from diskferry.control.resources.dataupload import VM_NAME, DataUpload
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.resources.vmbackup import VirtualMachineBackup
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.qemu import cbt
from diskferry.worker import WorkerJob


class Listener:
    """A Unix socket that counts the connections made to it, and answers nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.accepted = 0
        self._server = socket.socket(socket.AF_UNIX)
        self._server.bind(str(path))
        self._server.listen()
        self._held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)

    def close(self) -> None:
        self._server.close()
        for conn in self._held:
            conn.close()


class RecordingRunner(LocalRunner):
    """A runner that records the jobs it is asked to start and starts none."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.started: dict[str, WorkerJob] = {}

    def start(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile] = (),
        for_claim: tuple[str, str] | None = None,
    ) -> None:
        self.started[job_id] = job


@dataclass
class World:
    """A store holding a Ready VirtualDisk `vd-s` the controllers made, and no controller
    running: nothing but the test writes a VM's status."""

    data_dir: Path
    objects: ObjectService
    client: EmbeddedClient
    volumes: DirectoryVolumes
    machines: QemuMachines
    disk: Path

    def track(self) -> None:
        """Put `vd-s` on its CBT overlay, as a running VM with CBT has it."""
        cbt.enable(str(self.disk))

    def create(self, kind: str, name: str, spec: dict[str, Any], **metadata: Any) -> None:
        body = {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name, **metadata},
            "spec": spec,
        }
        self.objects.create(REGISTRY.by_kind(kind), "default", body)

    def vm(self, name: str, status: dict[str, Any], **spec: Any) -> VirtualMachine:
        """A VM on `vd-s` whose status says `status`, as a client may have patched it."""
        refs = [{"kind": "VirtualDisk", "name": "vd-s"}]
        spec = {"runPolicy": "Manual", "blockDeviceRefs": refs, **spec}
        self.create("VirtualMachine", name, spec)
        info = REGISTRY.by_kind("VirtualMachine")
        self.objects.patch(info, "default", name, {"status": status}, "merge", subresource="status")
        found = self.client.get(VirtualMachine, "default", name)
        assert found is not None
        return found


@pytest.fixture
def world() -> Iterator[World]:
    base = Path(tempfile.mkdtemp(prefix="dfsock", dir="/tmp"))
    made = Daemon(base / "d")
    disk = ready_disk(made, "vd-s")
    made.stop()
    objects = ObjectService(base / "d" / "state.db", REGISTRY)
    client = EmbeddedClient(objects, objects.registry)
    try:
        yield World(
            base / "d",
            objects,
            client,
            DirectoryVolumes(base / "d"),
            QemuMachines(base / "d"),
            disk,
        )
    finally:
        objects.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def evil(world: World) -> Iterator[Listener]:
    """A socket of the client's choosing, outside anything the daemon decided."""
    listener = Listener(world.data_dir.parent / "evil.sock")
    yield listener
    listener.close()


def test_a_backup_of_a_running_vm_reaches_qemu_by_its_own_socket_not_its_status(
    world: World, evil: Listener
) -> None:
    patched = {"phase": "Running", "qmpSocket": str(evil.path), "guestAgentSocket": str(evil.path)}
    world.vm("vm-s", patched, enableGuestAgent=True)
    world.track()
    world.create(
        "DataUpload", "up", {"backupStorageLocation": "repo"}, annotations={VM_NAME: "vm-s"}
    )
    upload = world.client.get(DataUpload, "default", "up")
    assert upload is not None
    runner = LocalRunner(world.data_dir)
    reconciler = DataUploadReconciler(
        world.client, runner, world.volumes, Scheduler(), world.machines
    )
    location = Location(str(world.data_dir.parent / "repo"), "a password")
    job = reconciler.prepare(upload, location, DataMoverConfigSpec())
    assert isinstance(job, Job)
    assert job.job.qmp == str(world.machines.qmp_socket("default", "vm-s"))
    assert job.job.qga is None  # the VM's own agent socket does not answer: no freeze
    assert evil.accepted == 0


def test_a_pull_backup_of_a_running_vm_reaches_qemu_by_its_own_socket(
    world: World, evil: Listener
) -> None:
    patched = {"phase": "Running", "qmpSocket": str(evil.path), "guestAgentSocket": str(evil.path)}
    vm = world.vm("vm-s", patched, enableGuestAgent=True)
    world.track()
    source = {"kind": "VirtualMachine", "name": "vm-s"}
    world.create("VirtualMachineBackup", "pull", {"source": source, "mode": "Pull"})
    backup = world.client.get(VirtualMachineBackup, "default", "pull")
    assert backup is not None
    runner = RecordingRunner(world.data_dir)
    certs = DaemonCa(world.data_dir / PKI_DIR)
    proxy = ProxyKeeper(runner, certs, port=free_port())
    pull = PullBackup(world.client, runner, world.volumes, world.machines, certs, proxy, Clock())
    pull.step(backup, Source(vm, None, None))
    job = runner.started[pull.job_id(backup)]
    assert job.qmp == str(world.machines.qmp_socket("default", "vm-s"))
    assert job.qga is None
    assert evil.accepted == 0


def _outside(world: World, evil: Listener) -> Path:
    return evil.path


def _allowed(world: World) -> Path:
    """DATA_DIR/vm-sockets, where the sockets of VMs run elsewhere are."""
    folder = world.data_dir / "vm-sockets"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _linked(world: World, evil: Listener) -> Path:
    link = _allowed(world) / "linked.sock"
    link.symlink_to(evil.path)
    return link


def _not_ours(world: World, evil: Listener) -> Path:
    moved = _allowed(world) / "theirs.sock"
    evil.path.rename(moved)
    nobody = pwd.getpwnam("nobody")
    os.chown(moved, nobody.pw_uid, nobody.pw_gid)
    return moved


@pytest.mark.parametrize(
    "named, refusal",
    [
        (_outside, "is not in"),
        (_linked, "is not a socket"),
        (_not_ours, "is owned by"),
    ],
    ids=["outside", "symlink", "not-ours"],
)
def test_a_qmp_socket_the_daemon_may_not_use_is_refused_unconnected(
    world: World, evil: Listener, named, refusal: str
) -> None:
    path = named(world, evil)
    world.create(
        "VirtualMachine",
        "vm-x",
        {
            "runPolicy": "Manual",
            "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd-s"}],
            "qmpSocket": str(path),
        },
    )
    vm = world.client.get(VirtualMachine, "default", "vm-x")
    assert vm is not None
    store = LayoutImageStore(world.data_dir)
    runner = LocalRunner(world.data_dir)
    vms = VirtualMachineReconciler(world.client, runner, world.volumes, store, world.machines)
    vms.reconcile(vm)
    status = world.objects.get(REGISTRY.by_kind("VirtualMachine"), "default", "vm-x")["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "QmpSocketRefused"
    assert refusal in ready["message"] and str(path) in ready["message"]
    assert "qmpSocket" not in status
    assert evil.accepted == 0
