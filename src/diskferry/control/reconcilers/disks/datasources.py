"""A data source as an import reads it: an HTTP URL, an image in a container registry, an
upload, the claim of a Ready image, disk or snapshot, or an image in the image store; a
source not Ready yet (or a pull Secret not there yet) is waited for.

Where an object's data is comes from what the daemon decided, never from its status, which a
client may patch: its claim is named by its kind, name and uid and found in whichever
StorageClass holds it, and its image in the store by its kind, namespace, name and uid."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from diskferry.base.errors import DiskferryError
from diskferry.control.host.images import REPOSITORIES, ImageStore
from diskferry.control.host.volumes import Claim, Volumes
from diskferry.control.reconcilers.disks.importjob import Source
from diskferry.control.reconcilers.disks.inuse import disk_holders, names
from diskferry.control.reconcilers.disks.storageclasses import volume_class
from diskferry.control.resources.common import (
    Checksum,
    ContainerImage,
    DataSource,
    DataSourceHTTP,
    DataSourceType,
    DataSourceUpload,
    registry_on_loopback,
    registry_reference,
)
from diskferry.control.resources.core import Secret
from diskferry.control.resources.model import Reason, Resource
from diskferry.control.resources.storageclass import StorageClass
from diskferry.control.resources.vdsnapshot import VirtualDiskSnapshot
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import (
    ClusterVirtualImage,
    StorageType,
    VirtualImage,
)
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.phases import READY

_CHECKSUMS = ("sha512", "sha256", "sha1", "md5")
DOCKER_CONFIG_KEY = ".dockerconfigjson"
SOURCE_IN_USE = "SourceInUse"
_REFERABLE: dict[str, type[Resource]] = {
    "VirtualImage": VirtualImage,
    "ClusterVirtualImage": ClusterVirtualImage,
    "VirtualDisk": VirtualDisk,
    "VirtualDiskSnapshot": VirtualDiskSnapshot,
}
SOURCE_NOT_READY = Reason("SourceNotReady")
DISK_CLAIM_LOST = Reason("DiskClaimLost")
"""The reason of work that needs a disk's claim, gone meanwhile."""
CLAIM_PREFIXES = {"VirtualDisk": "vd", "VirtualImage": "vi", "VirtualDiskSnapshot": "vds"}
"""The kinds kept in claims, and how their claims' names begin, as Deckhouse names its PVCs."""


class SourceRefusedError(DiskferryError):
    """The data source is of a kind this daemon cannot read."""

    reason = "DataSourceRefused"


@dataclass(frozen=True)
class Waiting:
    """The source is not there or not Ready yet, or in use, as `reason` says."""

    message: str
    reason: str = SOURCE_NOT_READY


def strongest(checksum: Checksum | None) -> str | None:
    """The strongest digest given, as the import job takes it (`ALGO:HEX`); None for none."""
    if checksum is not None:
        for algorithm in _CHECKSUMS:
            digest = getattr(checksum, algorithm)
            if digest:
                return f"{algorithm}:{digest}"
    return None


def http_source(http: DataSourceHTTP) -> Source:
    """The URL, its strongest checksum, and its CA bundle as PEM."""
    bundle = base64.b64decode(http.ca_bundle) if http.ca_bundle else None
    return Source(http.url, checksum=strongest(http.checksum), ca_bundle=bundle)


def upload_source(upload: DataSourceUpload | None) -> Source:
    """What the user uploads, with the strongest checksum it must match."""
    return Source("the upload", checksum=strongest(upload and upload.checksum), upload=True)


def container_image_source(
    client: Client, namespace: str | None, image: ContainerImage
) -> Source | Waiting:
    """The docker:// reference, the pull Secret's Docker config, the CA bundle; a registry on
    loopback with no CA bundle is reached over plain HTTP, as a local registry serves."""
    reference = registry_reference(image.image)
    authfile = None
    secret_ref = image.image_pull_secret
    if secret_ref is not None and secret_ref.name:
        where = getattr(secret_ref, "namespace", None) or namespace
        secret = client.get(Secret, where, secret_ref.name)
        if secret is None:
            return Waiting(f"waiting for the pull Secret {secret_ref.name}: it does not exist")
        authfile = secret.value(DOCKER_CONFIG_KEY)
        if authfile is None:
            message = f"waiting for the pull Secret {secret_ref.name} to hold {DOCKER_CONFIG_KEY}"
            return Waiting(message)
    bundle = base64.b64decode(image.ca_bundle) if image.ca_bundle else None
    insecure = bundle is None and registry_on_loopback(reference)
    return Source(reference, ca_bundle=bundle, authfile=authfile, insecure=insecure)


def kept_in_store(obj: Resource) -> bool:
    """Whether `obj` is an image kept in the image store (a ClusterVirtualImage, or a
    VirtualImage with `storage: ContainerRegistry`), not in a claim."""
    return obj.kind in REPOSITORIES and not (isinstance(obj, VirtualImage) and not in_store(obj))


def stored_image(store: ImageStore, obj: Resource) -> Source | None:
    """The image in the store a Ready image was written to, None when it is kept in a claim."""
    if not kept_in_store(obj):
        return None
    reference = store.reference(obj)
    unpacked = ((obj.to_json().get("status") or {}).get("size") or {}).get("unpackedBytes")
    return Source(reference, size=int(unpacked) if unpacked else None, uid=obj.metadata.uid)


def in_store(image: VirtualImage) -> bool:
    """Whether the VirtualImage is kept in the image store (else in a claim)."""
    return image.spec.storage is StorageType.CONTAINER_REGISTRY


def claim_name(obj: Resource) -> str:
    """The name of the claim of a disk, an image or a snapshot, made of its kind, name and uid."""
    return f"{CLAIM_PREFIXES[obj.kind]}-{obj.metadata.name}-{obj.metadata.uid}"


def claim_of(client: Client, volumes: Volumes, obj: Resource) -> Claim | None:
    """The claim a disk, image or snapshot was written to, None when it has none (yet)."""
    namespace = obj.metadata.namespace
    if obj.kind not in CLAIM_PREFIXES or namespace is None:
        return None
    classes = sorted(client.list(StorageClass), key=lambda sc: sc.metadata.name or "")
    return volumes.locate([volume_class(sc) for sc in classes], namespace, claim_name(obj))


def resolve_source(
    client: Client,
    volumes: Volumes,
    store: ImageStore,
    namespace: str | None,
    data_source: DataSource,
) -> Source | Waiting:
    """What to import for `data_source`, or why it must wait."""
    if data_source.type is DataSourceType.HTTP and data_source.http is not None:
        return http_source(data_source.http)
    if data_source.type is DataSourceType.CONTAINER_IMAGE and data_source.container_image:
        return container_image_source(client, namespace, data_source.container_image)
    if data_source.type is DataSourceType.UPLOAD:
        return upload_source(data_source.upload)
    ref = data_source.object_ref
    if data_source.type is not DataSourceType.OBJECT_REF or ref is None:
        raise SourceRefusedError(f"a data source of type {data_source.type} cannot be read here")
    kind = str(ref.kind)
    model = _REFERABLE.get(kind)
    if model is None:
        raise SourceRefusedError(f"a data source of kind {kind} cannot be read here")
    where = None if model is ClusterVirtualImage else getattr(ref, "namespace", None) or namespace
    found = client.get(model, where, ref.name)
    if found is None:
        return Waiting(f"waiting for the {kind} {ref.name}: it does not exist")
    phase = (found.to_json().get("status") or {}).get("phase")
    if phase != READY:
        return Waiting(f"waiting for the {kind} {ref.name} to be Ready (it is {phase or 'new'})")
    held = disk_holders(client, where, ref.name) if isinstance(found, VirtualDisk) else []
    if held:
        message = (
            f"waiting for the VirtualDisk {ref.name}: the VirtualMachines {names(held)} hold it "
            "(stop them, or copy it through a VirtualDiskSnapshot)"
        )
        return Waiting(message, SOURCE_IN_USE)
    stored = stored_image(store, found)
    if stored is not None:
        return stored
    claim = claim_of(client, volumes, found)
    if claim is None or not claim.ready:
        return Waiting(f"waiting for the {kind} {ref.name}: its claim is missing")
    return Source(
        str(claim.file), size=claim.size(), uid=found.metadata.uid, namespace=claim.namespace
    )
