"""containerDisks written: the one-layer tar image KubeVirt runs, pushed to a destination."""

from __future__ import annotations

import json
import os
import tarfile
from dataclasses import dataclass
from typing import IO, Any

from diskferry.disk.progress import Progress
from diskferry.registry.destination import Destination, push_small
from diskferry.registry.digests import digest_of, hasher
from diskferry.registry.images import OCI_CONFIG, OCI_MANIFEST

LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
DISK_OWNER = 107  # the qemu user KubeVirt runs as
ANNOTATION = "io.diskferry.disk"


@dataclass
class DiskFile:
    """A disk image file to store: its path, the name under disk/, its format and size."""

    path: str
    name: str
    format: str
    virtual_size: int


class _Digester:
    """A write-only sink that counts and hashes (to learn a layer's digest before upload)."""

    def __init__(self) -> None:
        self.hash = hasher("sha256:")
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return len(data)

    @property
    def digest(self) -> str:
        return f"sha256:{self.hash.hexdigest()}"


def _write_layer(disk: DiskFile, sink: Any, progress: Progress | None) -> None:
    """The layer tar: disk/ and disk/<name>, owned 107:107, mtime 0 (so its digest repeats)."""
    with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        folder = tarfile.TarInfo("disk")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o555
        folder.uid = folder.gid = DISK_OWNER
        tar.addfile(folder)
        entry = tarfile.TarInfo(f"disk/{disk.name}")
        entry.size, entry.mode = os.path.getsize(disk.path), 0o444
        entry.uid = entry.gid = DISK_OWNER
        with open(disk.path, "rb") as f:
            tar.addfile(entry, _Counted(f, progress))


class _Counted:
    def __init__(self, f: IO[bytes], progress: Progress | None) -> None:
        self._f, self._progress = f, progress

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        if self._progress is not None:
            self._progress.add(len(data))
        return data


@dataclass
class Pushed:
    """What a push stored: where, the manifest's digest, the layer's, the disk file's size."""

    name: str
    digest: str
    layer_digest: str
    layer_size: int
    stored_size: int


def push_container_disk(
    destination: Destination, disk: DiskFile, progress: Progress | None = None
) -> Pushed:
    """Store `disk` as a containerDisk; a layer the destination has is not sent again."""
    digester = _Digester()
    _write_layer(disk, digester, None)
    stored = os.path.getsize(disk.path)
    if progress is not None:
        progress.set_total(stored)
    if not destination.has_blob(digester.digest):
        upload = destination.open_upload()
        try:
            _write_layer(disk, upload, progress)
            upload.finish(digester.digest)
        except BaseException:
            upload.cancel()
            raise
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": [digester.digest]},
            "config": {},
        },
        sort_keys=True,
    ).encode()
    config_digest = digest_of(config)
    push_small(destination, config, config_digest)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": LAYER_TAR, "digest": digester.digest, "size": digester.size}],
        "annotations": {
            f"{ANNOTATION}.name": disk.name,
            f"{ANNOTATION}.format": disk.format,
            f"{ANNOTATION}.stored-size": str(stored),
            f"{ANNOTATION}.unpacked-size": str(disk.virtual_size),
        },
    }
    body = json.dumps(manifest, sort_keys=True).encode()
    digest = destination.put_manifest(body, OCI_MANIFEST)
    return Pushed(destination.pinned(digest), digest, digester.digest, digester.size, stored)
