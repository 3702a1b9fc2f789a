"""The served kinds through the ObjectService: the examples stored, a disk's update rules, the
status subresource of a VirtualDisk, strategic patches refused for custom kinds."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.clock import ManualClock
from diskferry.control.errors import InvalidError, UnsupportedMediaTypeError
from diskferry.control.resources.registry import REGISTRY

DISKS = REGISTRY.by_kind("VirtualDisk")
DISK = {
    "apiVersion": "diskferry.io/v1alpha1",
    "kind": "VirtualDisk",
    "metadata": {"name": "vd1", "namespace": "default"},
    "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
}


def contains(stored: Any, given: Any) -> bool:
    """Whether every value `given` is in `stored`, defaults aside."""
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(
            k in stored and contains(stored[k], v) for k, v in given.items()
        )
    return stored == given


@pytest.fixture
def service(tmp_path: Path) -> ObjectService:
    svc = ObjectService(tmp_path / "state.db", REGISTRY, ManualClock())
    yield svc
    svc.close()


def test_every_example_is_stored_as_given(service: ObjectService, example: dict[str, Any]) -> None:
    info = REGISTRY.by_kind(example["kind"])
    namespace = example["metadata"].get("namespace")
    stored, warnings = service.create(info, namespace, copy.deepcopy(example))
    assert warnings == []
    assert stored["metadata"]["generation"] == 1
    assert service.get(info, namespace, example["metadata"]["name"]) == stored
    assert contains(
        stored, {k: v for k, v in example.items() if k not in ("metadata", "stringData")}
    )
    assert contains(stored["metadata"], example["metadata"])


def test_a_disk_may_grow_and_its_generation_follows(service: ObjectService) -> None:
    service.create(DISKS, "default", DISK)
    grown, _ = service.patch(
        DISKS, "default", "vd1", {"spec": {"persistentVolumeClaim": {"size": "128Mi"}}}, "merge"
    )
    assert grown["metadata"]["generation"] == 2
    ready = {"status": {"phase": "Ready"}}  # past Pending: its spec is fixed but the size
    service.patch(DISKS, "default", "vd1", ready, "merge", subresource="status")
    with pytest.raises(InvalidError, match=r"spec\.persistentVolumeClaim\.size: may only grow"):
        service.patch(
            DISKS, "default", "vd1", {"spec": {"persistentVolumeClaim": {"size": "1Mi"}}}, "merge"
        )
    with pytest.raises(InvalidError, match=r"spec\.dataSource"):
        body = {"spec": {"dataSource": {"type": "HTTP", "http": {"url": "https://x/d.img"}}}}
        service.patch(DISKS, "default", "vd1", body, "merge")
    assert service.get(DISKS, "default", "vd1")["spec"]["persistentVolumeClaim"]["size"] == "128Mi"


def test_a_disks_status_is_written_through_its_subresource(service: ObjectService) -> None:
    service.create(DISKS, "default", DISK)
    status = {"status": {"phase": "Provisioning", "progress": "12.5%"}}
    written, _ = service.patch(DISKS, "default", "vd1", status, "merge", subresource="status")
    assert written["status"]["phase"] == "Provisioning"
    assert written["status"]["progress"] == "12.5%"
    assert written["metadata"]["generation"] == 1
    ignored, _ = service.patch(DISKS, "default", "vd1", {"status": {"phase": "Ready"}}, "merge")
    assert ignored["status"]["phase"] == "Provisioning"


def test_strategic_patches_only_for_built_in_groups(service: ObjectService) -> None:
    service.create(DISKS, "default", DISK)
    with pytest.raises(UnsupportedMediaTypeError):
        service.patch(DISKS, "default", "vd1", {"metadata": {"labels": {"a": "b"}}}, "strategic")
    classes = REGISTRY.lookup("storageclass")
    service.create(
        classes, None, {"metadata": {"name": "fast"}, "provisioner": "diskferry.io/local"}
    )
    patched, _ = service.patch(
        classes, None, "fast", {"metadata": {"labels": {"tier": "fast"}}}, "strategic"
    )
    assert patched["metadata"]["labels"] == {"tier": "fast"}
