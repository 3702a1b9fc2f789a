"""A spec may be corrected until the object's work starts, as Deckhouse allows: a disk Pending
on a StorageClass that does not exist takes another and is made in it; once its claim is made
or its worker started, a change is refused saying why, and the spec it was made from stays."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from reconcile_support import Daemon
from reconcile_support import http_source as _http

from diskferry.control.errors import InvalidError
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.resources.virtualimage import VIRTUAL_IMAGES

MiB = 1 << 20


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    running = Daemon(tmp_path / "data")
    yield running
    running.stop()


def _reason(obj: dict[str, Any]) -> str | None:
    ready = [c for c in obj["status"].get("conditions", []) if c["type"] == "Ready"]
    return ready[0]["reason"] if ready else None


def _refusal(daemon: Daemon, kind: str, name: str, spec: dict[str, Any]) -> str:
    info = VIRTUAL_DISKS if kind == "VirtualDisk" else VIRTUAL_IMAGES
    with pytest.raises(InvalidError) as caught:
        daemon.objects.patch(info, "default", name, {"spec": spec}, "merge")
    return caught.value.message


def test_a_pending_disk_takes_another_storage_class_and_keeps_it_once_made(daemon) -> None:
    spec = {"persistentVolumeClaim": {"size": "1Mi", "storageClassName": "nowhere"}}
    daemon.apply("VirtualDisk", "lost", spec)
    wait_until(lambda: _reason(daemon.get("VirtualDisk", "lost")) == "StorageClassNotFound")
    fixed = {"persistentVolumeClaim": {"storageClassName": "local"}}
    daemon.objects.patch(VIRTUAL_DISKS, "default", "lost", {"spec": fixed}, "merge")
    disk = daemon.wait_phase("VirtualDisk", "lost", "Ready", "Failed", timeout=30)
    status = disk["status"]
    assert (status["phase"], status["storageClassName"], status["observedGeneration"]) == (
        "Ready",
        "local",
        2,
    )
    assert daemon.claim(disk).stat().st_size == MiB
    moved = {"persistentVolumeClaim": {"storageClassName": "local-block"}}
    message = _refusal(daemon, "VirtualDisk", "lost", moved)
    assert "storageClassName: field is immutable once the disk has left Pending (it is Ready" in (
        message
    )
    assert daemon.get("VirtualDisk", "lost")["spec"]["persistentVolumeClaim"] == {
        "size": "1Mi",
        "storageClassName": "local",
    }


def test_a_disk_or_image_whose_import_runs_keeps_its_source(daemon, faulty, tmp_path) -> None:
    source = tmp_path / "slow.raw"
    source.write_bytes(os.urandom(8 * MiB))
    url = faulty.add("slow.raw", source, piece=128 * 1024, trickle=0.1)
    other = {"dataSource": _http(f"{faulty.url}/other.raw")}
    daemon.apply("VirtualDisk", "slow", {"dataSource": _http(url)})
    daemon.apply("VirtualImage", "slow", {"dataSource": _http(url)})
    for kind, why in [
        ("VirtualDisk", "the disk has left Pending (it is Provisioning: its claim is made"),
        ("VirtualImage", "the image has left Pending (it is Provisioning: its worker started)"),
    ]:
        daemon.wait_phase(kind, "slow", "Provisioning")
        assert f"spec.dataSource: field is immutable once {why}" in (
            _refusal(daemon, kind, "slow", other)
        )
    for kind in ("VirtualDisk", "VirtualImage"):
        ready = daemon.wait_phase(kind, "slow", "Ready", "Failed")
        assert ready["status"]["phase"] == "Ready", ready["status"]
        assert ready["spec"]["dataSource"]["http"]["url"] == url
