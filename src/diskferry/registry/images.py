"""Manifests: fetch by tag or digest, pick the platform from an index, push and delete."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from diskferry.registry.blobs import pull_scope, push_scope
from diskferry.registry.client import RegistryClient
from diskferry.registry.digests import digest_of, verify
from diskferry.registry.errors import ManifestUnknownError, RegistryError
from diskferry.registry.reference import Reference

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
_INDEXES = (OCI_INDEX, DOCKER_LIST)
_ACCEPT = ", ".join((OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST))
_MAX_MANIFEST = 4 << 20


@dataclass
class Manifest:
    """A manifest or index as the registry sent it, with its digest."""

    media_type: str
    body: bytes
    digest: str

    @property
    def json(self) -> dict[str, Any]:
        """The parsed document."""
        return json.loads(self.body)


@dataclass
class Image:
    """An image resolved for one platform: its manifest, its config, its layers."""

    name: str
    manifest: Manifest
    config: dict[str, Any]

    @property
    def layers(self) -> list[dict[str, Any]]:
        """The layer descriptors, base first."""
        return self.manifest.json.get("layers", [])

    @property
    def annotations(self) -> dict[str, str]:
        """The manifest's annotations."""
        return self.manifest.json.get("annotations") or {}


def get_manifest(client: RegistryClient, repository: str, reference: str) -> Manifest:
    """The manifest (or index) `reference` names; one asked by digest is checked against it."""
    what = f"docker://{client.registry}/{repository}{'@' if ':' in reference else ':'}{reference}"
    resp = client.request(
        "GET",
        f"/v2/{repository}/manifests/{reference}",
        scope=pull_scope(repository),
        what=what,
        headers={"Accept": _ACCEPT},
    )
    body = resp.data
    if len(body) > _MAX_MANIFEST:
        raise RegistryError(f"{what}: the manifest is larger than {_MAX_MANIFEST} bytes")
    if reference.startswith("sha"):
        verify(body, reference, what)
    digest = reference if reference.startswith("sha") else digest_of(body)
    try:
        media_type = json.loads(body).get("mediaType") or resp.headers.get("Content-Type", "")
    except (ValueError, AttributeError) as e:
        raise RegistryError(f"{what}: the manifest is not JSON") from e
    return Manifest(media_type.split(";")[0].strip(), body, digest)


def is_index(manifest: Manifest) -> bool:
    """Whether `manifest` is an image index (a manifest list)."""
    return manifest.media_type in _INDEXES or "manifests" in manifest.json


def pick_platform(index: dict[str, Any], platform: str, what: str) -> str:
    """The digest of the manifest for `platform` (os/architecture) in an index."""
    want_os, _, want_arch = platform.partition("/")
    seen = []
    for entry in index.get("manifests", []):
        plat = entry.get("platform") or {}
        if plat.get("os") == want_os and plat.get("architecture") == want_arch:
            return entry["digest"]
        seen.append(f"{plat.get('os')}/{plat.get('architecture')}")
    raise ManifestUnknownError(
        f"{what}: no manifest for {platform} in the index (it has {', '.join(seen) or 'none'})"
    )


def resolve(client: RegistryClient, ref: Reference, platform: str = "linux/amd64") -> Image:
    """The image `ref` names for `platform`: index followed, config fetched and verified."""
    manifest = get_manifest(client, ref.repository, ref.reference)
    if is_index(manifest):
        digest = pick_platform(manifest.json, platform, str(ref))
        manifest = get_manifest(client, ref.repository, digest)
    config_desc = manifest.json.get("config") or {}
    config = {}
    if config_desc.get("digest"):
        config = json.loads(read_small_blob(client, ref.repository, config_desc["digest"]))
    return Image(str(ref.with_digest(manifest.digest)), manifest, config)


def read_small_blob(client: RegistryClient, repository: str, digest: str) -> bytes:
    """A config-sized blob, whole, checked against its digest."""
    what = f"{client.registry}/{repository}@{digest}"
    resp = client.request(
        "GET", f"/v2/{repository}/blobs/{digest}", scope=pull_scope(repository), what=what
    )
    data = resp.data
    verify(data, digest, what)
    return data


def put_manifest(
    client: RegistryClient, repository: str, reference: str, body: bytes, media_type: str
) -> str:
    """Push a manifest or index under a tag (or its digest); answers its digest."""
    client.request(
        "PUT",
        f"/v2/{repository}/manifests/{reference}",
        scope=push_scope(repository),
        what=f"docker://{client.registry}/{repository}:{reference}",
        ok=(201,),
        headers={"Content-Type": media_type},
        body=body,
    ).release_conn()
    return digest_of(body)


def delete_manifest(client: RegistryClient, repository: str, digest: str) -> None:
    """Delete the manifest `digest` (and so every tag naming it)."""
    client.request(
        "DELETE",
        f"/v2/{repository}/manifests/{digest}",
        scope=f"repository:{repository}:delete",
        what=f"docker://{client.registry}/{repository}@{digest}",
        ok=(202,),
    ).release_conn()


def describe(image: Image) -> dict[str, Any]:
    """What `image inspect` shows: digest, platform, layers, annotations."""
    return {
        "reference": image.name,
        "digest": image.manifest.digest,
        "mediaType": image.manifest.media_type,
        "platform": f"{image.config.get('os')}/{image.config.get('architecture')}",
        "layers": [
            {"digest": d.get("digest"), "size": d.get("size"), "mediaType": d.get("mediaType")}
            for d in image.layers
        ],
        "annotations": image.annotations,
    }


def list_tags(client: RegistryClient, repository: str) -> list[str]:
    """The tags of `repository`."""
    resp = client.request(
        "GET",
        f"/v2/{repository}/tags/list",
        scope=pull_scope(repository),
        what=f"docker://{client.registry}/{repository}",
    )
    try:
        return sorted(json.loads(resp.data).get("tags") or [])
    except (ValueError, AttributeError) as e:
        raise RegistryError(f"{client.registry}/{repository}: the tag list is not JSON") from e
