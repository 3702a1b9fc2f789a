"""containerDisks: the one-layer tar image KubeVirt runs, written and read as streams."""

from __future__ import annotations

import json
import os
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import IO, Any

from diskferry.disk.decompress import DecompressingReader
from diskferry.disk.formats import probe_compression
from diskferry.disk.peek import PeekReader
from diskferry.disk.progress import Progress
from diskferry.registry.blobs import Upload, blob_exists, push_bytes
from diskferry.registry.client import RegistryClient
from diskferry.registry.digests import BlobOpener, VerifiedReader, digest_of, hasher
from diskferry.registry.errors import ContainerDiskError
from diskferry.registry.images import OCI_CONFIG, OCI_MANIFEST, Image, put_manifest
from diskferry.registry.reference import Reference

LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
DISK_OWNER = 107  # the qemu user KubeVirt runs as
ANNOTATION = "io.diskferry.disk"
_SHOWN_ENTRIES = 5


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
    """What a push stored: the manifest's digest and the layer's size and digest."""

    reference: Reference
    digest: str
    layer_digest: str
    layer_size: int


def push_container_disk(
    client: RegistryClient, ref: Reference, disk: DiskFile, progress: Progress | None = None
) -> Pushed:
    """Store `disk` as a containerDisk at `ref`; a layer the registry has is not sent again."""
    digester = _Digester()
    _write_layer(disk, digester, None)
    stored = os.path.getsize(disk.path)
    if progress is not None:
        progress.set_total(stored)
    repo = ref.repository
    if not blob_exists(client, repo, digester.digest):
        upload = Upload(client, repo)
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
    push_bytes(client, repo, config, config_digest)
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
    digest = put_manifest(client, repo, ref.tag or "latest", body, OCI_MANIFEST)
    return Pushed(ref.with_digest(digest), digest, digester.digest, digester.size)


def _disk_name(member: tarfile.TarInfo) -> str | None:
    """The name under disk/ of a regular file there, else None."""
    parts = PurePosixPath(member.name.lstrip("/")).parts
    parts = tuple(p for p in parts if p != ".")
    if member.isreg() and len(parts) == 2 and parts[0] == "disk":
        return member.name
    return None


class ContainerDiskStream:
    """The disk file of a containerDisk, read while its layers stream; a second disk is refused.

    The layers are read in order through their tar entries; the first regular file
    directly under disk/ is the disk. Its end is reported only once the rest of the
    image was read and its digests checked, so nothing is committed from a bad image.
    """

    def __init__(
        self,
        image: Image,
        open_blob: BlobOpener,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.image = image
        self.name = image.name
        self.layer_size = sum(int(layer.get("size", 0)) for layer in image.layers)
        self._open_blob, self._progress, self._cancel = open_blob, progress, cancel
        self._seen: list[str] = []
        self._blobs: list[VerifiedReader] = []
        self._members = self._walk()
        try:
            self.disk_name, self.size, self._entry = self._find_disk()
        except BaseException:
            self.close()
            raise

    def _open_layer(self, layer: dict[str, Any]) -> tarfile.TarFile:
        blob = self._open_blob(layer["digest"], layer.get("size"), self._progress, self._cancel)
        self._blobs.append(blob)
        raw = PeekReader(blob)
        compression = probe_compression(raw.peek(8))
        body = DecompressingReader(raw, compression) if compression else raw
        try:
            return tarfile.open(fileobj=body, mode="r|")
        except tarfile.TarError as e:
            raise ContainerDiskError(
                f"{self.name}: layer {layer['digest']} is not a tar archive ({e})"
            ) from e

    def _walk(self) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
        for layer in self.image.layers:
            tar = self._open_layer(layer)
            try:
                for member in tar:
                    yield tar, member
            except tarfile.TarError as e:
                raise ContainerDiskError(f"{self.name}: a layer is not a readable tar ({e})") from e
            self._blobs[-1].drain()

    def _find_disk(self) -> tuple[str, int, IO[bytes]]:
        for tar, member in self._members:
            self._seen.append(member.name)
            if _disk_name(member):
                entry = tar.extractfile(member)
                assert entry is not None
                return member.name, member.size, entry
        shown = ", ".join(self._seen[:_SHOWN_ENTRIES]) or "no entries"
        more = f" and {len(self._seen) - _SHOWN_ENTRIES} more" if len(self._seen) > 5 else ""
        raise ContainerDiskError(f"{self.name}: no disk file under disk/ (found {shown}{more})")

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` bytes of the disk file; b'' once the whole image was read and verified."""
        data = self._entry.read(n)
        if not data:
            self._finish()
        return data

    def _finish(self) -> None:
        for _, member in self._members:
            if _disk_name(member):
                raise ContainerDiskError(
                    f"{self.name}: more than one disk under disk/ "
                    f"({self.disk_name} and {member.name}); refusing it"
                )

    @property
    def resumes(self) -> int:
        """How many times a layer's transfer resumed after a break."""
        return sum(getattr(blob, "resumes", 0) for blob in self._blobs)

    def close(self) -> None:
        """Give the connections back."""
        self._members.close()
        for blob in self._blobs:
            blob.close()
