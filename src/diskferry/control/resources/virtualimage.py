"""VirtualImage and ClusterVirtualImage: an image that disks are made from."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from diskferry.control.kinds import AGE, Column, KindInfo
from diskferry.control.model import API_VERSION, GROUP, VERSION, ApiModel, Resource, Status
from diskferry.control.resources.common import (
    ApiVersion,
    ContainerImage,
    DataSource,
    ImagePullSecret,
    ImageUploadURLs,
    ObjectRef,
    ObjectRefKind,
    Progress,
    StatusSpeed,
    invalid,
)


class ImagePhase(StrEnum):
    """Where an image is in its life."""

    PENDING = "Pending"
    WAIT_FOR_USER_UPLOAD = "WaitForUserUpload"
    PROVISIONING = "Provisioning"
    READY = "Ready"
    FAILED = "Failed"
    IMAGE_LOST = "ImageLost"
    PVC_LOST = "PVCLost"
    TERMINATING = "Terminating"


class StorageType(StrEnum):
    """Where a VirtualImage is kept: in the image registry, or in a claim of its own."""

    CONTAINER_REGISTRY = "ContainerRegistry"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"


class VirtualImagePersistentVolumeClaim(ApiModel):
    """The claim of a `PersistentVolumeClaim` image: its StorageClass, the default when unset."""

    storage_class_name: str | None = Field(default=None, alias="storageClassName")


class VirtualImageSpec(ApiModel):
    """The image wanted: where it is kept and where its data comes from."""

    storage: StorageType = Field(default=StorageType.CONTAINER_REGISTRY, validate_default=True)
    persistent_volume_claim: VirtualImagePersistentVolumeClaim = Field(
        default_factory=VirtualImagePersistentVolumeClaim, alias="persistentVolumeClaim"
    )
    data_source: DataSource = Field(alias="dataSource")


class ImageStatusSize(ApiModel):
    """The image's sizes: as stored and unpacked, as text and in bytes (as strings)."""

    stored: str | None = None
    stored_bytes: str | None = Field(default=None, alias="storedBytes")
    unpacked: str | None = None
    unpacked_bytes: str | None = Field(default=None, alias="unpackedBytes")


class ImageStatusTarget(ApiModel):
    """Where the image was written, as shown (the store's reference or the claim's name): the
    daemon finds the image by its kind, name and uid, never by this."""

    registry_url: str | None = Field(default=None, alias="registryURL")
    persistent_volume_claim_name: str | None = Field(
        default=None, alias="persistentVolumeClaimName"
    )


class ImageStatus(Status):
    """What was observed of an image."""

    phase: ImagePhase | None = None
    progress: Progress | None = None
    download_speed: StatusSpeed | None = Field(default=None, alias="downloadSpeed")
    size: ImageStatusSize | None = None
    format: str | None = None
    cdrom: bool | None = None
    target: ImageStatusTarget | None = None
    image_upload_urls: ImageUploadURLs | None = Field(default=None, alias="imageUploadURLs")
    source_uid: str | None = Field(default=None, alias="sourceUID")


class VirtualImageStatus(ImageStatus):
    """What was observed of a VirtualImage, with the StorageClass of its claim."""

    storage_class_name: str | None = Field(default=None, alias="storageClassName")


class VirtualImage(Resource):
    """An image in a namespace, kept in the registry or in a claim."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualImage"] = "VirtualImage"
    spec: VirtualImageSpec
    status: VirtualImageStatus = Field(default_factory=VirtualImageStatus)


NAMESPACED_SOURCES = {
    ObjectRefKind.VIRTUAL_IMAGE,
    ObjectRefKind.VIRTUAL_DISK,
    ObjectRefKind.VIRTUAL_DISK_SNAPSHOT,
}


class ClusterVirtualImageObjectRef(ObjectRef):
    """An object whose data makes the image; a namespaced one names its namespace."""

    namespace: str | None = Field(default=None, max_length=63)

    @model_validator(mode="after")
    def _namespace_given(self) -> ClusterVirtualImageObjectRef:
        if self.kind in NAMESPACED_SOURCES and not self.namespace:
            raise invalid(f"namespace is required for a {self.kind}")
        return self


class ClusterContainerImage(ContainerImage):
    """An image in a container registry, its pull Secret in the namespace named."""

    image_pull_secret: ImagePullSecret | None = Field(default=None, alias="imagePullSecret")


class ClusterVirtualImageDataSource(DataSource):
    """Where a ClusterVirtualImage's data comes from."""

    container_image: ClusterContainerImage | None = Field(default=None, alias="containerImage")
    object_ref: ClusterVirtualImageObjectRef | None = Field(default=None, alias="objectRef")


class ClusterVirtualImageSpec(ApiModel):
    """The image wanted: where its data comes from; it is always kept in the image store."""

    data_source: ClusterVirtualImageDataSource = Field(alias="dataSource")


class ClusterVirtualImageStatus(ImageStatus):
    """What was observed of a ClusterVirtualImage, with the namespaces that use it."""

    used_in_namespaces: list[str] | None = Field(default=None, alias="usedInNamespaces")


class ClusterVirtualImage(Resource):
    """An image every namespace can use, kept in the image store."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["ClusterVirtualImage"] = "ClusterVirtualImage"
    spec: ClusterVirtualImageSpec
    status: ClusterVirtualImageStatus = Field(default_factory=ClusterVirtualImageStatus)


IMAGE_COLUMNS = (
    Column("Phase", ".status.phase"),
    Column("CDROM", ".status.cdrom", "boolean"),
    Column("Progress", ".status.progress"),
    Column("StoredSize", ".status.size.stored", priority=1),
    Column("UnpackedSize", ".status.size.unpacked", priority=1),
    Column("Registry URL", ".status.target.registryURL", priority=1),
)
VIRTUAL_IMAGES = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualImage",
    plural="virtualimages",
    model=VirtualImage,
    short_names=("vi",),
    categories=("all", "diskferry"),
    columns=(
        *IMAGE_COLUMNS,
        Column("TargetPVC", ".status.target.persistentVolumeClaimName", priority=1),
        AGE,
    ),
)
CLUSTER_VIRTUAL_IMAGES = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="ClusterVirtualImage",
    plural="clustervirtualimages",
    model=ClusterVirtualImage,
    namespaced=False,
    short_names=("cvi",),
    categories=("diskferry",),
    columns=(*IMAGE_COLUMNS, AGE),
)
