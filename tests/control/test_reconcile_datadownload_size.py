"""A DataDownload reads its snapshot's size once: the worker that read it stays its record while
the download waits for its claim to be bound, or for a mover's slot, and is settled once the
download ended."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.host.embedded.volumes import DirectoryVolumes
from diskferry.control.host.volumes import Claim
from diskferry.control.reconcilers.datamover.admission import Scheduler
from diskferry.control.reconcilers.datamover.datadownload import DataDownloadReconciler
from diskferry.control.reconcilers.datamover.moverlife import Job, Waiting
from diskferry.control.reconcilers.velero.repoaccess import Location
from diskferry.control.resources.datadownload import INTO_CLAIM, DataDownload
from diskferry.control.resources.datamoverconfig import DataMoverConfigSpec
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.storageclass import StorageClass
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.control.runtime.runner.base import JobFile, JobState
from diskferry.worker.job import WorkerJob

MiB = 1 << 20
SIZES = {"ok": True, "repository": "r", "created": False, "encrypted": True, "sizes": {"s1": MiB}}


class EndingRunner:
    """Runs each job to an `ok` end at once, the snapshot's size its result; counts the runs
    of each job id."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}
        self.jobs: set[str] = set()

    def start(
        self,
        job_id: str,
        job: WorkerJob,
        files: Sequence[JobFile] = (),
        for_claim: tuple[str, str] | None = None,
    ) -> None:
        if job_id not in self.jobs:
            self.jobs.add(job_id)
            self.runs[job_id] = self.runs.get(job_id, 0) + 1

    def state(self, job_id: str) -> JobState | None:
        if job_id not in self.jobs:
            return None
        return JobState(job_id, False, result=SIZES, exit_code=0)

    def log_tail(self, job_id: str, lines: int = 200) -> list[str]:
        return []

    def read_file(self, job_id: str, name: str) -> bytes | None:
        return None

    def purge(self, job_id: str, keep_scratch: bool) -> bool:
        self.jobs.discard(job_id)
        return True

    def forget(self, job_id: str) -> bool:
        self.jobs.discard(job_id)
        return True


class UnboundVolumes(DirectoryVolumes):
    """This host's claims, none writable until `bound`, as a PVC not bound yet."""

    bound = False

    def writable(self, claim: Claim) -> bool:
        return self.bound


@dataclass
class World:
    """A DataDownload into a claim of the default class, and its reconciler over a runner
    whose jobs end at once."""

    reconciler: DataDownloadReconciler
    runner: EndingRunner
    volumes: UnboundVolumes
    download: DataDownload

    def prepare(self) -> Job | Waiting:
        location = Location(url="/repo", password="p")
        return self.reconciler.prepare(self.download, location, DataMoverConfigSpec())


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    objects = ObjectService(tmp_path / "state.db", REGISTRY)
    client = EmbeddedClient(objects, REGISTRY)
    default = {"storageclass.kubernetes.io/is-default-class": "true"}
    client.create(
        StorageClass.model_validate({"metadata": {"name": "local", "annotations": default}})
    )
    meta = {"name": "dd", "namespace": "default", "annotations": {INTO_CLAIM: "true"}}
    spec = {"backupStorageLocation": "bsl", "snapshotID": "s1", "targetVolume": {"pvc": "root"}}
    download = client.create(DataDownload.model_validate({"metadata": meta, "spec": spec}))
    runner = EndingRunner()
    volumes = UnboundVolumes(tmp_path)
    reconciler = DataDownloadReconciler(client, runner, volumes, Scheduler())
    yield World(reconciler, runner, volumes, download)
    objects.close()


def test_the_snapshot_size_is_read_once_while_the_claim_is_not_bound(world: World) -> None:
    size_id = world.reconciler.size_job_id(world.download)
    waited = [world.prepare() for _ in range(4)]
    assert all(isinstance(w, Waiting) for w in waited)
    assert "to be bound" in waited[-1].message
    world.volumes.bound = True
    for _ in range(2):  # as while it waits for a mover's slot
        prepared = world.prepare()
        assert isinstance(prepared, Job) and prepared.job.size == MiB
    assert world.runner.runs == {size_id: 1}
    assert world.reconciler.cleanup(world.download, succeeded=True)
    assert world.runner.state(size_id) is None
