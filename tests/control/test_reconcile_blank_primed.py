"""A blank disk a DataDownload restores into, whose claim is ready only once sealed (a PVC, its
prime's volume handed to it): its blank worker runs once, however often the disk is reconciled
while the download runs, and the disk is Ready once the download Completed, the blank job's
record gone then."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from primed_support import PrimedVolumes

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.host.embedded.imagestore import LayoutImageStore
from diskferry.control.reconcilers.disks.virtualdisk import VirtualDiskReconciler
from diskferry.control.reconcilers.disks.volumejobs import BLANK
from diskferry.control.resources.datadownload import MADE_BY, DataDownload
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.storageclass import StorageClass
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.local import LocalRunner
from diskferry.worker.job import WorkerJob


class CountingRunner(LocalRunner):
    """This host's runner, counting the runs it starts of each job id."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.runs: dict[str, int] = {}

    def start(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile] = (),
        for_claim: tuple[str, str] | None = None,
    ) -> None:
        if self.state(job_id) is None:
            self.runs[job_id] = self.runs.get(job_id, 0) + 1
        super().start(job_id, job, files, for_claim)


@dataclass
class World:
    """A store holding a DataDownload InProgress and the blank VirtualDisk it restores into,
    and the disk's reconciler, which only the test calls."""

    client: EmbeddedClient
    runner: CountingRunner
    reconciler: VirtualDiskReconciler
    download: DataDownload

    def disk(self) -> VirtualDisk:
        found = self.client.get(VirtualDisk, "default", "restored")
        assert found is not None
        return found

    def reconcile(self) -> VirtualDisk:
        self.reconciler.reconcile(self.disk())
        return self.disk()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    objects = ObjectService(tmp_path / "state.db", REGISTRY)
    client = EmbeddedClient(objects, REGISTRY)
    client.create(StorageClass.model_validate({"metadata": {"name": "local"}}))
    spec = {
        "backupStorageLocation": "bsl",
        "snapshotID": "s1",
        "targetVolume": {"pvc": "restored"},
    }
    meta = {"name": "dd", "namespace": "default"}
    download = client.create(DataDownload.model_validate({"metadata": meta, "spec": spec}))
    client.patch_status(download, {"phase": "InProgress"})
    labels = {MADE_BY: download.metadata.uid}
    client.create(
        VirtualDisk.model_validate(
            {
                "metadata": {"name": "restored", "namespace": "default", "labels": labels},
                "spec": {"persistentVolumeClaim": {"size": "1Mi", "storageClassName": "local"}},
            }
        )
    )
    runner = CountingRunner(tmp_path)
    volumes = PrimedVolumes(tmp_path)
    reconciler = VirtualDiskReconciler(client, runner, volumes, LayoutImageStore(tmp_path))
    yield World(client, runner, reconciler, download)
    objects.close()


def _reason(disk: VirtualDisk) -> str | None:
    ready = next((c for c in disk.status.conditions if c.type == "Ready"), None)
    return None if ready is None else ready.reason


def test_the_blank_worker_runs_once_while_a_download_fills_the_disk(world: World) -> None:
    blank_id = world.reconciler.volume_job_id(world.disk(), BLANK)
    deadline = time.monotonic() + 60
    while _reason(world.reconcile()) != "WaitingForDataDownload":
        assert time.monotonic() < deadline, world.disk().status
        time.sleep(0.1)
    for _ in range(3):
        disk = world.reconcile()
        assert (disk.status.phase, _reason(disk)) == ("Provisioning", "WaitingForDataDownload")
    assert world.runner.runs == {blank_id: 1}
    world.client.patch_status(world.download, {"phase": "Completed"})
    assert world.reconcile().status.phase == "Ready"
    world.reconcile()
    assert world.runner.state(blank_id) is None
    assert world.runner.runs == {blank_id: 1}
