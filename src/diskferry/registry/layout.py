"""OCI image layout directories (`oci:DIR[:TAG]`, as skopeo writes them): read and write.

What is written is its writer's alone, whatever the umask: folders (the layout's and the
parents it makes) 0700, files 0600, as a disk image is."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from diskferry.disk.progress import Progress
from diskferry.registry.digests import DIGEST_FORMAT, VerifiedReader, digest_of, hasher, verify
from diskferry.registry.errors import (
    BadReferenceError,
    BlobUnknownError,
    DigestMismatchError,
    ManifestUnknownError,
    RegistryError,
)
from diskferry.registry.images import Image, Manifest, is_index, pick_platform

REF_NAME = "org.opencontainers.image.ref.name"
FOLDER_MODE = 0o700
FILE_MODE = 0o600


def parse_layout_reference(text: str) -> tuple[Path, str | None]:
    """(DIR, TAG or None) of oci:DIR[:TAG]."""
    rest = text.removeprefix("oci:")
    folder, sep, tag = rest.rpartition(":")
    if not sep or "/" in tag:
        folder, tag = rest, ""
    if not folder:
        raise BadReferenceError(f"{text!r} is not oci:DIR[:TAG]")
    return Path(folder), tag or None


class Layout:
    """An OCI image layout directory: index.json, and blobs/ALGO/HEX named by content."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        if not (folder / "oci-layout").is_file():
            raise RegistryError(f"{folder} is not an OCI image layout (no oci-layout file)")

    @classmethod
    def create(cls, folder: Path) -> Layout:
        """The layout at `folder`, made when it does not exist or is empty."""
        try:
            private_folder(folder)
            if not (folder / "oci-layout").exists() and not any(folder.iterdir()):
                _replace(folder / "oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}))
                _replace(folder / "index.json", json.dumps({"schemaVersion": 2, "manifests": []}))
        except OSError as e:
            raise RegistryError(f"cannot make an OCI layout in {folder}: {e.strerror}") from e
        return cls(folder)

    def destination(self, tag: str) -> LayoutDestination:
        """A push into this layout under `tag`."""
        return LayoutDestination(self, tag)

    def blob_path(self, digest: str) -> Path:
        """Where the blob `digest` lives."""
        if not DIGEST_FORMAT.match(digest):
            raise RegistryError(f"{self.folder}: {digest!r} is not a digest", reason="BadDigest")
        algorithm, hex_digest = digest.split(":", 1)
        return self.folder / "blobs" / algorithm / hex_digest

    def read_blob(self, digest: str) -> bytes:
        """A small blob, whole, checked against its digest."""
        try:
            data = self.blob_path(digest).read_bytes()
        except FileNotFoundError as e:
            raise BlobUnknownError(f"{self.folder}: no blob {digest}") from e
        verify(data, digest, f"{self.folder}@{digest}")
        return data

    def open_blob(
        self,
        digest: str,
        size: int | None,
        progress: Progress | None = None,
        cancel: threading.Event | None = None,
    ) -> VerifiedReader:
        """A blob as it streams, verified."""
        try:
            raw = open(self.blob_path(digest), "rb")  # noqa: SIM115
        except FileNotFoundError as e:
            raise BlobUnknownError(f"{self.folder}: no blob {digest}") from e
        return VerifiedReader(raw, digest, size, f"{self.folder}@{digest}", progress)

    def _manifest(self, digest: str) -> Manifest:
        body = self.read_blob(digest)
        try:
            media_type = json.loads(body).get("mediaType", "")
        except (ValueError, AttributeError) as e:
            raise RegistryError(f"{self.folder}@{digest}: the manifest is not JSON") from e
        return Manifest(media_type, body, digest)

    def index(self) -> dict:
        """index.json."""
        try:
            return json.loads((self.folder / "index.json").read_text())
        except (OSError, ValueError) as e:
            raise RegistryError(f"{self.folder}: cannot read index.json") from e

    def tag(self, tag: str, descriptor: dict) -> None:
        """Point `tag` at the manifest `descriptor` in index.json (replaced whole)."""
        index = self.index()
        kept = [
            e
            for e in index.get("manifests", [])
            if (e.get("annotations") or {}).get(REF_NAME) != tag
        ]
        index["manifests"] = [*kept, {**descriptor, "annotations": {REF_NAME: tag}}]
        _replace(self.folder / "index.json", json.dumps(index, sort_keys=True))

    def _entry(self, tag: str | None) -> dict:
        entries = self.index().get("manifests", [])
        if tag is None and len(entries) == 1:
            return entries[0]
        for entry in entries:
            if (entry.get("annotations") or {}).get(REF_NAME) == tag:
                return entry
        tags = sorted(str((e.get("annotations") or {}).get(REF_NAME)) for e in entries)
        wanted = f"no image tagged {tag!r}" if tag else "more than one image: name a tag"
        raise ManifestUnknownError(
            f"oci:{self.folder}: {wanted} (the layout has {', '.join(tags) or 'none'})"
        )

    def image(self, tag: str | None, platform: str = "linux/amd64") -> Image:
        """The image tagged `tag` for `platform`, config read and verified."""
        manifest = self._manifest(self._entry(tag)["digest"])
        if is_index(manifest):
            manifest = self._manifest(pick_platform(manifest.json, platform, f"oci:{self.folder}"))
        config_digest = (manifest.json.get("config") or {}).get("digest")
        config = json.loads(self.read_blob(config_digest)) if config_digest else {}
        return Image(f"oci:{self.folder}@{manifest.digest}", manifest, config)


def private_folder(folder: Path) -> None:
    """Make `folder` and the parents it lacks, each 0700 whatever the umask (what a layout is
    written into, and any other folder kept from other users)."""
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        with contextlib.suppress(FileExistsError):
            made.mkdir(mode=FOLDER_MODE)
        os.chmod(made, FOLDER_MODE)


def _replace(path: Path, text: str | bytes) -> None:
    """Write `path` whole, 0600, through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    data = text.encode() if isinstance(text, str) else text
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(os.open(tmp, flags, FILE_MODE), "wb") as f:
        os.fchmod(f.fileno(), FILE_MODE)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class LayoutBlobWriter:
    """A blob written to a temporary file in the layout, renamed to its digest when it matches."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._hash = hasher("sha256:")
        self.size = 0
        folder = layout.folder / "blobs" / "sha256"
        private_folder(folder)
        self._file = tempfile.NamedTemporaryFile(dir=folder, prefix=".upload-", delete=False)  # noqa: SIM115

    def write(self, data: bytes) -> int:
        """Take `data`."""
        self._hash.update(data)
        self.size += len(data)
        return self._file.write(data)

    def finish(self, digest: str) -> None:
        """Commit the blob as `digest`, which must be what was written."""
        actual = f"sha256:{self._hash.hexdigest()}"
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        if actual != digest:
            self.cancel()
            raise DigestMismatchError(f"{self.layout.folder}: wrote {actual}, not {digest}")
        os.replace(self._file.name, self.layout.blob_path(digest))

    def cancel(self) -> None:
        """Drop the temporary file."""
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._file.name)


@dataclass
class LayoutDestination:
    """A push into a layout under a tag."""

    layout: Layout
    tag: str

    @property
    def name(self) -> str:
        """oci:DIR:TAG."""
        return f"oci:{self.layout.folder}:{self.tag}"

    def has_blob(self, digest: str) -> bool:
        """Whether the layout holds `digest`."""
        return self.layout.blob_path(digest).is_file()

    def open_upload(self) -> LayoutBlobWriter:
        """A blob writer."""
        return LayoutBlobWriter(self.layout)

    def put_manifest(self, body: bytes, media_type: str) -> str:
        """Store the manifest and tag it; its digest."""
        digest = digest_of(body)
        if not self.has_blob(digest):
            _replace(self.layout.blob_path(digest), body)
        self.layout.tag(self.tag, {"mediaType": media_type, "digest": digest, "size": len(body)})
        return digest

    def pinned(self, digest: str) -> str:
        """oci:DIR@DIGEST."""
        return f"oci:{self.layout.folder}@{digest}"
