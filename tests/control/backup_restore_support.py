"""What the Backup and Restore tests share: a daemon, documents applied as kubectl would, disks
with data, and the file of a disk in any namespace."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from control_support import wait_until
from reconcile_support import Daemon

from diskferry.control.errors import NotFoundError
from diskferry.control.resources.registry import REGISTRY

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.fixture
def base(monkeypatch) -> Iterator[Path]:
    """A directory short enough for the VMs' Unix sockets, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="dfbk", dir="/tmp"))
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(path / "cache"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def documents(name: str, bucket: Path) -> list[dict[str, Any]]:
    """The example `name`'s documents, the location's directory moved to `bucket`."""
    docs = list(yaml.safe_load_all((EXAMPLES / name).read_text()))
    for doc in docs:
        if doc["kind"] == "BackupStorageLocation":
            doc["spec"]["objectStorage"]["bucket"] = str(bucket)
    return docs


def apply(daemon: Daemon, docs: list[dict[str, Any]]) -> None:
    """Create each document in its namespace (default when it names none)."""
    for doc in docs:
        info = REGISTRY.by_kind(doc["kind"])
        namespace = doc["metadata"].get("namespace", "default") if info.namespaced else None
        daemon.objects.create(info, namespace, doc)


def get(daemon: Daemon, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """The object, None when it does not exist."""
    try:
        return daemon.objects.get(REGISTRY.by_kind(kind), namespace, name)
    except NotFoundError:
        return None


def wait_for(daemon: Daemon, kind: str, namespace: str, name: str, *phases: str) -> dict:
    """The object once its phase is one of `phases`."""
    return wait_until(
        lambda: (
            (o := get(daemon, kind, namespace, name))
            and o.get("status", {}).get("phase") in phases
            and o
        ),
        120,
    )


def disk_file(daemon: Daemon, namespace: str, name: str) -> Path:
    """The claim file of the Ready VirtualDisk `namespace/name`."""
    status = wait_for(daemon, "VirtualDisk", namespace, name, "Ready")["status"]
    claim = status["target"]["persistentVolumeClaimName"]
    return daemon.data_dir / "volumes" / status["storageClassName"] / namespace / f"{claim}.img"


def disk(daemon: Daemon, name: str, data: bytes, size: str = "4Mi", **labels: str) -> Path:
    """A Ready VirtualDisk in default holding `data` at 1 MiB; its file."""
    body = {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDisk",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"persistentVolumeClaim": {"size": size}},
    }
    apply(daemon, [body])
    path = disk_file(daemon, "default", name)
    with open(path, "r+b") as f:
        f.seek(1 << 20)
        f.write(data)
    return path
