"""The backup tests' daemon: the controllers with a moto S3 server, Secrets and storage
locations at hand, and helpers to make VMs, disks, uploads and downloads."""

from __future__ import annotations

import base64
import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reconcile_support import Daemon

sys.path.insert(0, str(Path(__file__).parent.parent / "objstore"))

from s3server import ACCESS_KEY, SECRET_KEY, make_bucket, running_moto

from diskferry.backup.repository import Repository
from diskferry.control.resources.core import SECRETS
from diskferry.control.resources.dataupload import VM_NAME
from diskferry.control.resources.model import API_VERSION

PASSWORD = "bars-secret"
CREDENTIALS = f"[default]\naws_access_key_id={ACCESS_KEY}\naws_secret_access_key={SECRET_KEY}\n"

__all__ = ["CREDENTIALS", "PASSWORD", "make_bucket", "running_moto"]


def secret(daemon: Daemon, name: str, **data: str) -> None:
    """Create the Secret `name` in the default namespace holding `data`."""
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    daemon.objects.create(SECRETS, "default", body)


def filesystem_bsl(directory: Path, **extra: Any) -> dict[str, Any]:
    """The spec of a filesystem location in `directory`, its password in the Secret repo-pass."""
    return {
        "provider": "filesystem",
        "objectStorage": {"bucket": str(directory)},
        "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
        **extra,
    }


def s3_bsl(endpoint: str, bucket: str, prefix: str) -> dict[str, Any]:
    """The spec of an aws location on the S3 server at `endpoint`, keys in the Secret s3-keys."""
    return {
        "provider": "aws",
        "objectStorage": {"bucket": bucket, "prefix": prefix},
        "config": {"region": "us-east-1", "s3Url": endpoint},
        "credential": {"name": "s3-keys", "key": "cloud"},
        "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
    }


class MoverDaemon(Daemon):
    """The daemon, and helpers to make VMs with disks."""

    def disk(self, name: str, size: str = "8Mi", data: bytes = b"", offset: int = 0) -> Path:
        """A Ready blank VirtualDisk `name` with `data` written at `offset`; its claim file."""
        self.apply("VirtualDisk", name, {"persistentVolumeClaim": {"size": size}})
        claim = self.claim(self.wait_phase("VirtualDisk", name, "Ready"))
        if data:
            with open(claim, "r+b") as f:
                f.seek(offset)
                f.write(data)
        return claim

    def vm(self, name: str, disks: list[str], **metadata: Any) -> None:
        """A stopped VirtualMachine with `disks`."""
        body = {
            "apiVersion": API_VERSION,
            "kind": "VirtualMachine",
            "metadata": {"name": name, **metadata},
            "spec": {
                "runPolicy": "AlwaysOff",
                "blockDeviceRefs": [{"kind": "VirtualDisk", "name": d} for d in disks],
            },
        }
        self.objects.create(self.registry.by_kind("VirtualMachine"), "default", body)
        self.wait_phase("VirtualMachine", name, "Stopped")

    def mover_config(self, **spec: Any) -> None:
        """The DataMoverConfig `default`."""
        body = {
            "apiVersion": API_VERSION,
            "kind": "DataMoverConfig",
            "metadata": {"name": "default"},
            "spec": spec,
        }
        self.objects.create(self.registry.by_kind("DataMoverConfig"), None, body)

    def location(self, directory: Path) -> None:
        """The Available filesystem location `repo` in `directory`."""
        secret(self, "repo-pass", password=PASSWORD)
        self.apply("BackupStorageLocation", "repo", filesystem_bsl(directory))
        self.wait_phase("BackupStorageLocation", "repo", "Available")

    def upload(self, name: str, vm: str, cancel: bool = False, **spec: Any) -> None:
        """A DataUpload of `vm` to the location `repo`."""
        self.upload_with(name, vm, {}, cancel=cancel, **spec)

    def upload_with(
        self, name: str, vm: str, annotations: dict[str, str], cancel: bool = False, **spec: Any
    ) -> None:
        """A DataUpload of `vm` with more annotations."""
        body = {
            "apiVersion": API_VERSION,
            "kind": "DataUpload",
            "metadata": {"name": name, "annotations": {VM_NAME: vm, **annotations}},
            "spec": {"backupStorageLocation": "repo", "cancel": cancel, **spec},
        }
        self.objects.create(self.registry.by_kind("DataUpload"), "default", body)

    def patch_spec(self, kind: str, name: str, spec: dict[str, Any]) -> None:
        """Merge `spec` into the object's spec."""
        self.objects.patch(self.registry.by_kind(kind), "default", name, {"spec": spec}, "merge")


@contextlib.contextmanager
def repository_held(directory: Path) -> Iterator[None]:
    """The repository in `directory` locked exclusively (as a prune does): backups wait."""
    with (
        Repository.open(str(directory), PASSWORD) as repo,
        repo.lock("exclusive", "prune"),
    ):
        yield


class PhaseWatch:
    """Follows the watch events of one kind in a thread: each object's phase, and the most
    objects ever in `phase` at once."""

    def __init__(self, daemon: Daemon, kind: str, phase: str = "InProgress") -> None:
        self.info = daemon.registry.by_kind(kind)
        self.watch = daemon.objects.watch(
            self.info, None, resource_version=daemon.objects.resource_version()
        )
        self.phase = phase
        self.phases: dict[str, str | None] = {}
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        while not self._stop.is_set():
            for event in self.watch.next(0.2):
                obj = event.object
                if obj.get("kind") != self.info.kind:
                    continue
                self.phases[obj["metadata"]["name"]] = (obj.get("status") or {}).get("phase")
                now = sum(1 for p in self.phases.values() if p == self.phase)
                self.most = max(self.most, now)

    def count(self, phase: str) -> int:
        """How many objects are in `phase` now, as the events said."""
        return sum(1 for p in self.phases.values() if p == phase)

    def stop(self) -> None:
        """Stop following."""
        self._stop.set()
        self._thread.join(5)


def download(
    daemon: Daemon,
    name: str,
    snapshot: str,
    pvc: str,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> None:
    """A DataDownload of `snapshot` from the location `repo` into the new VirtualDisk `pvc`."""
    body = {
        "apiVersion": API_VERSION,
        "kind": "DataDownload",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "backupStorageLocation": "repo",
            "snapshotID": snapshot,
            "targetVolume": {"pvc": pvc, "namespace": "default"},
            **spec,
        },
    }
    daemon.objects.create(daemon.registry.by_kind("DataDownload"), "default", body)
