"""Where an image is written: a registry repository or an OCI layout directory, one interface."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from diskferry.disk.schemes import is_layout_reference
from diskferry.registry.blobs import Upload, blob_exists
from diskferry.registry.client import RegistryClient, RegistryOptions
from diskferry.registry.images import put_manifest
from diskferry.registry.layout import Layout, parse_layout_reference
from diskferry.registry.reference import parse_reference


class BlobWriter(Protocol):
    """A blob being written: bytes in, then committed under its digest, or dropped."""

    def write(self, data: bytes, /) -> int: ...

    def finish(self, digest: str) -> None: ...

    def cancel(self) -> None: ...


class Destination(Protocol):
    """What a push needs of where it writes."""

    name: str
    tag: str

    def has_blob(self, digest: str) -> bool: ...

    def open_upload(self) -> BlobWriter: ...

    def put_manifest(self, body: bytes, media_type: str) -> str: ...

    def pinned(self, digest: str) -> str: ...


@dataclass
class RegistryDestination:
    """A repository of a registry, and the tag to push."""

    client: RegistryClient
    repository: str
    tag: str

    @property
    def name(self) -> str:
        """docker://HOST/REPOSITORY:TAG."""
        return f"docker://{self.client.registry}/{self.repository}:{self.tag}"

    def has_blob(self, digest: str) -> bool:
        """Whether the repository holds `digest` already."""
        return blob_exists(self.client, self.repository, digest)

    def open_upload(self) -> Upload:
        """A chunked upload."""
        return Upload(self.client, self.repository)

    def put_manifest(self, body: bytes, media_type: str) -> str:
        """Push the manifest under the tag; its digest."""
        return put_manifest(self.client, self.repository, self.tag, body, media_type)

    def pinned(self, digest: str) -> str:
        """docker://HOST/REPOSITORY@DIGEST."""
        return f"docker://{self.client.registry}/{self.repository}@{digest}"


def push_small(destination: Destination, data: bytes, digest: str) -> None:
    """Write a small blob unless the destination has it."""
    if destination.has_blob(digest):
        return
    writer = destination.open_upload()
    writer.write(data)
    writer.finish(digest)


def open_destination(text: str, options: RegistryOptions) -> Destination:
    """The destination `text` names: docker://HOST/NAME[:TAG] or oci:DIR[:TAG]."""
    if is_layout_reference(text):
        folder, tag = parse_layout_reference(text)
        return Layout.create(folder).destination(tag or "latest")
    ref = parse_reference(text)
    return RegistryDestination(
        RegistryClient.for_reference(ref, options), ref.repository, ref.tag or "latest"
    )
