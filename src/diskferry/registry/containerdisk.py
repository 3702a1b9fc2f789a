"""containerDisks read: the disk file found in an image's tar layers while they stream."""

from __future__ import annotations

import tarfile
import threading
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import IO, Any

from diskferry.disk.decompress import DecompressingReader
from diskferry.disk.formats import probe_compression
from diskferry.disk.peek import PeekReader
from diskferry.disk.progress import Progress
from diskferry.registry.digests import BlobOpener, VerifiedReader
from diskferry.registry.errors import ContainerDiskError
from diskferry.registry.images import Image

_SHOWN_ENTRIES = 5


def disk_name(member: tarfile.TarInfo) -> str | None:
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
            if disk_name(member):
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
            if disk_name(member):
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
