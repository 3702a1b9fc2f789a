"""A Ready disk whose claim's storage must be expanded before its disk grows (a PVC's): Resizing
while the storage expands it, the storage's word in its Ready condition, late after a bound;
then its file grown by one worker run, even by a reconciler started again after that run; and,
where its class may not grow, Ready at its size, its Ready condition and one Warning Event
saying why, growing once the class allows it."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_reconcile_blank_primed import CountingRunner

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.host.embedded.imagestore import LayoutImageStore
from diskferry.control.host.embedded.volumes import DirectoryVolumes, FileClaim
from diskferry.control.host.volumes import (
    Claim,
    Expansion,
    ExpansionRefusedError,
    VolumeClass,
)
from diskferry.control.reconcilers.disks import claimlife
from diskferry.control.reconcilers.disks.virtualdisk import VirtualDiskReconciler
from diskferry.control.reconcilers.disks.volumejobs import GROW
from diskferry.control.resources.core import Event
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.storageclass import StorageClass
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.runtime.client import EmbeddedClient

MiB = 1 << 20
WAITING = "waiting for the storage to expand the claim"


@dataclass(frozen=True)
class SizedClaim(FileClaim):
    """A claim whose size is the one recorded of it, as a PVC's is, not its file's."""

    recorded: int = 0

    def size(self) -> int:
        """The size recorded of the claim."""
        return self.recorded


class ExpandingVolumes(DirectoryVolumes):
    """This host's claims, each of the size recorded of it (as a PVC is), whose storage
    expands only once told to, or refuses to."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.allowed = True
        self.expanded = False
        self.sizes: dict[str, int] = {}
        self.recorded: list[int] = []

    def _sized(self, claim: FileClaim | None) -> SizedClaim | None:
        if claim is None:
            return None
        fields = (claim.volume_class, claim.namespace, claim.name, claim.file, claim.path)
        return SizedClaim(*fields, recorded=self.sizes[claim.name])

    def claim(self, volume_class: VolumeClass, namespace: str, name: str, size: int) -> FileClaim:
        self.sizes.setdefault(name, size)
        made = self._sized(super().claim(volume_class, namespace, name, size))
        assert made is not None
        return made

    def find(self, volume_class: VolumeClass, namespace: str, name: str) -> FileClaim | None:
        return self._sized(super().find(volume_class, namespace, name))

    def locate(self, classes: Iterable[VolumeClass], namespace: str, name: str) -> FileClaim | None:
        return self._sized(super().locate(classes, namespace, name))

    def expand(self, claim: Claim, size: int) -> Expansion:
        if not self.allowed:
            raise ExpansionRefusedError("the StorageClass local does not allow volume expansion")
        return Expansion(self.expanded, grows_disk=True, message=f"{WAITING} to {size}")

    def resized(self, claim: Claim, size: int) -> None:
        self.sizes[claim.name] = size
        self.recorded.append(size)


@dataclass
class World:
    """A store holding a Ready blank disk of 1 MiB, and its reconciler, only the test calls."""

    client: EmbeddedClient
    runner: CountingRunner
    volumes: ExpandingVolumes
    reconciler: VirtualDiskReconciler

    def disk(self) -> VirtualDisk:
        found = self.client.get(VirtualDisk, "default", "grows")
        assert found is not None
        return found

    def reconcile(self) -> VirtualDisk:
        self.reconciler.reconcile(self.disk())
        return self.disk()

    def until(self, phase: str) -> VirtualDisk:
        deadline = time.monotonic() + 60
        while (disk := self.reconcile()).status.phase != phase:
            assert time.monotonic() < deadline, disk.status
            time.sleep(0.1)
        return disk

    def grow_to(self, size: str) -> None:
        disk = self.disk()
        disk.spec.persistent_volume_claim.size = size
        self.client.update(disk)

    def restarted(self) -> None:
        """A reconciler of its own, as an operator started again has."""
        self.reconciler = VirtualDiskReconciler(
            self.client, self.runner, self.volumes, self.reconciler.store
        )

    def warnings(self) -> list[Event]:
        return [e for e in self.client.list(Event, "default") if e.type == "Warning"]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    objects = ObjectService(tmp_path / "state.db", REGISTRY)
    client = EmbeddedClient(objects, REGISTRY)
    client.create(StorageClass.model_validate({"metadata": {"name": "local"}}))
    spec = {"persistentVolumeClaim": {"size": "1Mi", "storageClassName": "local"}}
    meta = {"name": "grows", "namespace": "default"}
    client.create(VirtualDisk.model_validate({"metadata": meta, "spec": spec}))
    runner = CountingRunner(tmp_path)
    volumes = ExpandingVolumes(tmp_path)
    reconciler = VirtualDiskReconciler(client, runner, volumes, LayoutImageStore(tmp_path))
    made = World(client, runner, volumes, reconciler)
    made.until("Ready")
    yield made
    objects.close()


def _ready(disk: VirtualDisk) -> tuple[str, str, str]:
    ready = next(c for c in disk.status.conditions if c.type == "Ready")
    return ready.status, ready.reason or "", ready.message or ""


def test_a_disk_waits_for_its_storage_then_grows_its_file_once(world: World) -> None:
    world.grow_to("2Mi")
    for _ in range(3):
        disk = world.reconcile()
        assert disk.status.phase == "Resizing"
        assert _ready(disk) == ("False", "Resizing", f"{WAITING} to {2 * MiB}")
    grow_id = world.reconciler.volume_job_id(world.disk(), GROW)
    assert grow_id not in world.runner.runs  # not before the storage has room
    world.volumes.expanded = True
    world.reconcile()
    deadline = time.monotonic() + 60
    while (state := world.runner.state(grow_id)) is None or state.running:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert world.disk().status.phase == "Resizing"
    world.restarted()  # after the grow ran, before the disk said so
    disk = world.until("Ready")
    assert (disk.status.capacity, disk.status.observed_generation) == ("2Mi", 2)
    assert world.runner.runs[grow_id] == 1
    assert world.volumes.recorded == [2 * MiB]
    world.restarted()
    world.reconcile()
    assert world.runner.runs[grow_id] == 1 and world.volumes.recorded == [2 * MiB]


def test_a_storage_late_to_expand_is_said_with_a_warning(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claimlife, "EXPANSION_SECONDS", -1.0)
    world.grow_to("2Mi")
    world.reconcile()
    disk = world.reconcile()
    assert disk.status.phase == "Resizing"
    status, reason, message = _ready(disk)
    assert (status, reason) == ("False", "ExpansionTimedOut") and WAITING in message
    world.reconcile()
    [warning] = world.warnings()
    assert (warning.reason, warning.count) == ("ExpansionTimedOut", 1)


def test_a_class_that_may_not_grow_leaves_the_disk_ready_saying_why(world: World) -> None:
    world.volumes.allowed = False
    world.grow_to("2Mi")
    for _ in range(3):
        disk = world.reconcile()
        assert (disk.status.phase, disk.status.capacity) == ("Ready", "1Mi")
        status, reason, message = _ready(disk)
        assert (status, reason) == ("True", "VolumeExpansionNotAllowed")
        assert "does not allow volume expansion" in message
    [warning] = world.warnings()
    assert (warning.reason, warning.count) == ("VolumeExpansionNotAllowed", 1)
    world.volumes.allowed = world.volumes.expanded = True
    disk = world.until("Resizing")
    disk = world.until("Ready")
    assert disk.status.capacity == "2Mi"
    assert _ready(disk)[:2] == ("True", "Ready")
