"""OCI image layout directories (`oci:DIR[:TAG]`, as skopeo writes them), read-only."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from diskferry.disk.progress import Progress
from diskferry.registry.digests import DIGEST_FORMAT, VerifiedReader, verify
from diskferry.registry.errors import (
    BadReferenceError,
    BlobUnknownError,
    ManifestUnknownError,
    RegistryError,
)
from diskferry.registry.images import Image, Manifest, is_index, pick_platform

REF_NAME = "org.opencontainers.image.ref.name"


def is_layout_reference(text: str) -> bool:
    """Whether `text` is an oci:DIR[:TAG] reference."""
    return text.startswith("oci:")


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

    def _entry(self, tag: str | None) -> dict:
        try:
            index = json.loads((self.folder / "index.json").read_text())
        except (OSError, ValueError) as e:
            raise RegistryError(f"{self.folder}: cannot read index.json") from e
        entries = index.get("manifests", [])
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
