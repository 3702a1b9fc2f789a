"""A disk cloned from another where claims may sit on different hosts (a cluster's nodes), run
here with the embedded host's claims told apart: a worker serves the source's claim over NBD
with TLS, the import reads it from there, and the serving worker is gone however the clone
ends, done, failed or stopped; a disk a running VirtualMachine holds is cloned once it is
stopped."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from control_support import wait_until
from reconcile_support import Daemon, ready_condition
from reconcile_support import http_source as _http

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.host.embedded.certs import DaemonCa
from diskferry.control.host.embedded.imagestore import LayoutImageStore
from diskferry.control.host.embedded.volumes import DirectoryVolumes
from diskferry.control.host.volumes import VolumeClass
from diskferry.control.reconcilers.disks.clonesources import serve_job_id
from diskferry.control.reconcilers.disks.datasources import Waiting, claim_name, resolve_source
from diskferry.control.reconcilers.disks.importjob import Imports, Source
from diskferry.control.reconcilers.disks.storageclasses import volume_class
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.storageclass import StorageClass
from diskferry.control.resources.virtualdisk import VirtualDisk, VirtualDiskDataSource
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.control.runtime.runner.local import LocalRunner

MiB = 1 << 20


class ApartVolumes(DirectoryVolumes):
    """This host's claims, taken as if each were on a host of its own."""

    def shared_host(self) -> bool:
        return False


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data", volumes=ApartVolumes(tmp_path / "data"))
    yield running
    running.stop(workers=True)


def _clone(size: str) -> dict:
    ref = {"kind": "VirtualDisk", "name": "source"}
    return {
        "persistentVolumeClaim": {"size": size},
        "dataSource": {"type": "ObjectRef", "objectRef": ref},
    }


def _source(daemon: Daemon, nginx, images) -> dict:
    url = nginx.publish(images.reference, "served-source.raw")
    spec = {"persistentVolumeClaim": {"size": "40Mi"}, "dataSource": _http(url)}
    daemon.apply("VirtualDisk", "source", spec)
    return daemon.wait_phase("VirtualDisk", "source", "Ready")


def _served(daemon: Daemon, clone: dict) -> bool:
    """Whether the serving worker of the clone's import is still known to the runner."""
    job_id = f"vd-{clone['metadata']['uid']}"
    return daemon.controllers.runner.state(serve_job_id(job_id)) is not None


def test_a_clone_reads_its_source_from_a_worker_serving_it(daemon, nginx, images, caplog) -> None:
    caplog.set_level(logging.INFO, logger="diskferry.control")
    source = _source(daemon, nginx, images)
    daemon.apply("VirtualDisk", "copy", _clone("48Mi"))
    clone = daemon.wait_phase("VirtualDisk", "copy", "Ready", "Failed")
    assert clone["status"]["phase"] == "Ready", ready_condition(clone["status"])
    copied = daemon.claim(clone)
    assert copied.stat().st_size == 48 * MiB
    with open(daemon.claim(source), "rb") as a, open(copied, "rb") as b:
        assert a.read() == b.read(40 * MiB)
        assert b.read() == bytes(8 * MiB)
    wait_until(lambda: not _served(daemon, clone))
    serve_id = serve_job_id(f"vd-{clone['metadata']['uid']}")
    assert any(r.getMessage().startswith(f"{serve_id}: ") for r in caplog.records)
    assert not any("reflink" in r.getMessage() for r in caplog.records)


def test_a_failed_clone_removes_the_worker_serving_its_source(daemon, nginx, images) -> None:
    _source(daemon, nginx, images)
    daemon.apply("VirtualDisk", "small", _clone("8Mi"))
    failed = daemon.wait_phase("VirtualDisk", "small", "Failed")
    condition = ready_condition(failed["status"])
    assert condition["reason"] in ("SizeTooSmall", "TargetTooSmall"), condition
    wait_until(lambda: not _served(daemon, failed))


def test_a_clone_stopped_while_its_source_is_served_stops_that_worker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    volumes = ApartVolumes(data)
    files = VolumeClass("local")
    source = volumes.claim(files, "default", "vd-source-1", 0)
    with open(source.path, "wb") as f:
        f.truncate(4 * MiB)
    target = volumes.claim(files, "default", "vd-target-2", 0)
    runner = LocalRunner(data)
    imports = Imports(runner, DaemonCa(data / "pki"), served_claims=True)
    started = imports.step("vd-2", target, Source(source.path, size=4 * MiB, uid="1"), 4 * MiB)
    assert started.running
    wait_until(lambda: (state := runner.state(serve_job_id("vd-2"))) and state.running, 30)
    wait_until(lambda: imports.stop("vd-2"), 60, step=0.2)
    assert runner.state(serve_job_id("vd-2")) is None
    assert runner.state("vd-2") is None


def test_a_disk_a_running_vm_holds_is_cloned_once_it_stops(tmp_path: Path) -> None:
    objects = ObjectService(tmp_path / "state.db", REGISTRY)
    client = EmbeddedClient(objects, REGISTRY)
    volumes = DirectoryVolumes(tmp_path)
    client.create(StorageClass.model_validate({"metadata": {"name": "local"}}))
    disk = client.create(
        VirtualDisk.model_validate(
            {
                "metadata": {"name": "held", "namespace": "default"},
                "spec": {"persistentVolumeClaim": {"size": "1Mi"}},
            }
        )
    )
    local = volume_class(StorageClass.model_validate({"metadata": {"name": "local"}}))
    claim = volumes.claim(local, "default", claim_name(disk), 0)
    Path(claim.path).write_bytes(bytes(MiB))
    client.patch_status(disk, {"phase": "Ready"})
    vm = client.create(
        VirtualMachine.model_validate(
            {
                "metadata": {"name": "vm", "namespace": "default"},
                "spec": {"blockDeviceRefs": [{"kind": "VirtualDisk", "name": "held"}]},
            }
        )
    )
    ref = {"type": "ObjectRef", "objectRef": {"kind": "VirtualDisk", "name": "held"}}
    source = VirtualDiskDataSource.model_validate(ref)
    store = LayoutImageStore(tmp_path)
    client.patch_status(vm, {"phase": "Running"})
    waiting = resolve_source(client, volumes, store, "default", source)
    assert isinstance(waiting, Waiting) and waiting.reason == "SourceInUse"
    assert "the VirtualMachines vm hold it" in waiting.message
    client.patch_status(vm, {"phase": "Stopped"})
    found = resolve_source(client, volumes, store, "default", source)
    assert isinstance(found, Source) and found.location == claim.path
    assert (found.uid, found.namespace, found.size) == (disk.metadata.uid, "default", MiB)
    objects.close()
