"""A StorageClass as a cluster has it (examples/storageclass-ceph-rbd.yaml) in the embedded
daemon: stored as given, and a disk of it waits Pending, saying that this host cannot provision
it, with an Event; deleting that disk leaves nothing behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from control_support import wait_until
from reconcile_support import Daemon, ready_condition

from diskferry.control.resources.storageclass import STORAGE_CLASSES
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS

EXAMPLE = Path(__file__).parents[2] / "examples" / "storageclass-ceph-rbd.yaml"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data")
    yield running
    running.stop()


def test_a_disk_of_a_cluster_class_waits_saying_this_host_cannot_provision_it(
    daemon: Daemon,
) -> None:
    given = yaml.safe_load(EXAMPLE.read_text())
    stored, warnings = daemon.objects.create(STORAGE_CLASSES, None, dict(given))
    assert warnings == []
    assert {key: stored[key] for key in given if key != "metadata"} == {
        key: value for key, value in given.items() if key != "metadata"
    }
    claim = {"size": "1Mi", "storageClassName": "ceph-rbd"}
    daemon.apply("VirtualDisk", "ceph", {"persistentVolumeClaim": claim})
    disk = wait_until(
        lambda: (
            (o := daemon.get("VirtualDisk", "ceph"))
            and any(c["reason"] == "ProvisionerUnavailable" for c in o["status"]["conditions"])
            and o
        )
    )
    assert disk["status"]["phase"] == "Pending"
    message = ready_condition(disk["status"])["message"]
    assert "this host cannot provision claims of the StorageClass ceph-rbd" in message
    assert "rbd.csi.ceph.com" in message
    wait_until(lambda: "ProvisionerUnavailable" in {e["reason"] for e in daemon.events("ceph")})
    daemon.objects.delete(VIRTUAL_DISKS, "default", "ceph")
    wait_until(lambda: daemon.get("VirtualDisk", "ceph") is None)
    assert not (daemon.data_dir / "volumes" / "ceph-rbd").exists()
