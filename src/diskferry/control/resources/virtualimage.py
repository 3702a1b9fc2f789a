"""VirtualImage and ClusterVirtualImage: an image that disks are made from."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

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
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    IN_USE,
    READY,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
    Status,
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
    """Where a VirtualImage is kept: in the image store, or in a claim of its own."""

    CONTAINER_REGISTRY = "ContainerRegistry"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"


class VirtualImagePersistentVolumeClaim(ApiModel):
    """The claim of a `PersistentVolumeClaim` image: its StorageClass, the default when unset."""

    storage_class_name: str | None = Field(
        default=None,
        alias="storageClassName",
        description="The StorageClass the claim is made in. Default: the class annotated "
        'storageclass.kubernetes.io/is-default-class: "true" (`local` on a new daemon); while '
        "the class does not exist, the image stays Pending.",
    )


class VirtualImageSpec(ApiModel):
    """The image wanted: where it is kept and where its data comes from."""

    storage: StorageType = Field(
        default=StorageType.CONTAINER_REGISTRY,
        validate_default=True,
        description="ContainerRegistry (the default): kept in the daemon's image store, as a "
        "container-disk image (diskferry operator has no image store yet: such an image fails "
        "with ImageStoreUnavailable); PersistentVolumeClaim: kept in a claim of its own, as a "
        "disk is. Deckhouse's deprecated Kubernetes is refused: write PersistentVolumeClaim.",
    )
    persistent_volume_claim: VirtualImagePersistentVolumeClaim = Field(
        default_factory=VirtualImagePersistentVolumeClaim, alias="persistentVolumeClaim"
    )
    data_source: DataSource = Field(
        alias="dataSource",
        description="Where the image's data comes from: `type` and the one sub-object of that "
        "type. Required.",
    )


class ImageStatusSize(ApiModel):
    """The image's sizes, once Ready: as stored and unpacked, each as a quantity (1536Mi) and
    in bytes (a string)."""

    stored: str | None = Field(
        default=None,
        description="The space the image takes where it is kept.",
    )
    stored_bytes: str | None = Field(
        default=None, alias="storedBytes", description="The same, in bytes."
    )
    unpacked: str | None = Field(
        default=None,
        description="The size of the disk it holds: the least a disk made from it can be.",
    )
    unpacked_bytes: str | None = Field(
        default=None, alias="unpackedBytes", description="The same, in bytes."
    )


class ImageStatusTarget(ApiModel):
    """Where the image was written."""

    registry_url: str | None = Field(
        default=None,
        alias="registryURL",
        description="Its reference in the image store (an oci: reference), for an image kept "
        "there.",
    )
    persistent_volume_claim_name: str | None = Field(
        default=None,
        alias="persistentVolumeClaimName",
        description="The name of its claim (vi-<image>-<uid>), for a VirtualImage kept in one.",
    )


class ImageStatus(Status):
    """What was observed of an image."""

    phase: ImagePhase | None = Field(
        default=None,
        description="Pending (waiting for its source; the spec may still change), "
        "Provisioning (its data being imported), WaitForUserUpload (an Upload source waits "
        "for the upload at imageUploadURLs), Ready (the image can be used), Failed (the Ready "
        "condition's reason and message say why), ImageLost (its entry in the image store is "
        "gone), PVCLost (its claim is gone), Terminating (being deleted).",
    )
    progress: Progress | None = Field(
        default=None,
        description="How much of the data is imported while the image is provisioned, 0% to "
        "100% (42.5%); 100% once Ready.",
    )
    download_speed: StatusSpeed | None = Field(default=None, alias="downloadSpeed")
    size: ImageStatusSize | None = None
    format: str | None = Field(
        default=None,
        description="The image's format, once Ready: in the image store, raw or qcow2 as "
        "stored (qcow2 for a source in another format, or copied from a claim); in a claim, "
        "the source's format (raw, qcow2, vmdk, vhd, vhdx, vdi, iso).",
    )
    cdrom: bool | None = Field(
        default=None,
        description="Whether the source was an ISO image, which a VirtualMachine attaches as a "
        "CD-ROM.",
    )
    target: ImageStatusTarget | None = None
    image_upload_urls: ImageUploadURLs | None = Field(default=None, alias="imageUploadURLs")
    source_uid: str | None = Field(
        default=None,
        alias="sourceUID",
        description="The uid of the object (image, disk or snapshot) the data was copied from.",
    )


class VirtualImageStatus(ImageStatus):
    """What was observed of a VirtualImage, with the StorageClass of its claim."""

    storage_class_name: str | None = Field(
        default=None,
        alias="storageClassName",
        description="The StorageClass of the image's claim, for an image kept in one.",
    )


IMAGE_CONDITIONS = {
    READY: "True while the image is Ready: in the image store, or in its claim. False in every "
    "other phase, the reason saying why (what a Pending image waits for, Provisioning, "
    "ImageLost, PVCLost, a failure's reason).",
    IN_USE: "True (AttachedToVirtualMachine, naming the VMs) while a VirtualMachine holds the "
    "image, whose deletion then waits; False (NotInUse) once none does.",
    **RECONCILED_CONDITION,
}
"""The conditions of a VirtualImage and a ClusterVirtualImage, and what each means."""


class VirtualImage(Resource):
    """An image in a namespace, kept in the registry or in a claim.

    With storage ContainerRegistry (the default) the image is a containerDisk in the daemon's
    image store: the OCI layout DATA_DIR/images/vi/NAMESPACE/NAME, tagged with the image's uid and
    named by status.target.registryURL (oci:DIR:UID); `diskferry image serve DATA_DIR/images`
    serves the store as a registry. An image made from a claim (a disk's, a snapshot's, another
    image's) is stored as qcow2, so it keeps what the claim has allocated, not its whole size. With
    PersistentVolumeClaim it is kept in a claim of its own, as a disk is. An image in the store
    whose layout went missing is ImageLost; deleting the image removes it from the store. In a
    cluster (diskferry operator) there is no image store yet: an image kept there fails with
    ImageStoreUnavailable, and one kept in a claim is filled by a worker Pod.
    """

    CONDITIONS = IMAGE_CONDITIONS

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

    namespace: str | None = Field(
        default=None,
        max_length=63,
        description="The source's namespace: required for a VirtualImage, VirtualDisk or "
        "VirtualDiskSnapshot, none for a ClusterVirtualImage.",
    )

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

    data_source: ClusterVirtualImageDataSource = Field(
        alias="dataSource",
        description="Where the image's data comes from: `type` and the one sub-object of that "
        "type. Required.",
    )


class ClusterVirtualImageStatus(ImageStatus):
    """What was observed of a ClusterVirtualImage, with the namespaces that use it."""

    used_in_namespaces: list[str] | None = Field(
        default=None,
        alias="usedInNamespaces",
        description="The namespaces of the VirtualDisks made from the image, once it is Ready; "
        "unset when there are none.",
    )


class ClusterVirtualImage(Resource):
    """An image every namespace can use, kept in the image store.

    It has no spec.storage: it lives in the image store, the OCI layout DATA_DIR/images/cvi/NAME;
    its objectRef and its imagePullSecret name a namespace. An image in the store whose layout went
    missing is ImageLost; deleting the image removes it from the store. In a cluster (diskferry
    operator) there is no image store yet: the image fails with ImageStoreUnavailable.
    """

    CONDITIONS = IMAGE_CONDITIONS

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
