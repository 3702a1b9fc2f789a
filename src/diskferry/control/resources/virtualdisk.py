"""VirtualDisk: a disk in a claim of a StorageClass, blank or filled from a data source."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from diskferry.control.kinds import AGE, Column, KindInfo
from diskferry.control.model import API_VERSION, GROUP, VERSION, ApiModel, Resource, Status
from diskferry.control.quantity import parse_quantity
from diskferry.control.resources.common import (
    ApiVersion,
    DataSource,
    Duration,
    ImageUploadURLs,
    ObjectRef,
    Progress,
    Quantity,
    StatusSpeed,
    invalid,
)


class DiskPhase(StrEnum):
    """Where a VirtualDisk is in its life."""

    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    WAIT_FOR_USER_UPLOAD = "WaitForUserUpload"
    READY = "Ready"
    RESIZING = "Resizing"
    FAILED = "Failed"
    PVC_LOST = "PVCLost"
    TERMINATING = "Terminating"


class VirtualDiskObjectRefKind(StrEnum):
    """The kinds a disk can be made from."""

    VIRTUAL_IMAGE = "VirtualImage"
    CLUSTER_VIRTUAL_IMAGE = "ClusterVirtualImage"
    VIRTUAL_DISK_SNAPSHOT = "VirtualDiskSnapshot"


class VirtualDiskObjectRef(ObjectRef):
    """An image or a snapshot whose data fills the disk."""

    kind: VirtualDiskObjectRefKind


class VirtualDiskDataSource(DataSource):
    """Where the disk's data comes from."""

    object_ref: VirtualDiskObjectRef | None = Field(default=None, alias="objectRef")


class VirtualDiskPersistentVolumeClaim(ApiModel):
    """The claim that holds the disk: its StorageClass (the default one when unset) and size."""

    storage_class_name: str | None = Field(default=None, alias="storageClassName")
    size: Quantity | None = None

    @property
    def size_bytes(self) -> int | None:
        """The size in bytes, None when unset."""
        return None if self.size is None else parse_quantity(self.size)


class VirtualDiskSpec(ApiModel):
    """The disk wanted: a claim and, unless blank, a data source."""

    data_source: VirtualDiskDataSource | None = Field(default=None, alias="dataSource")
    persistent_volume_claim: VirtualDiskPersistentVolumeClaim = Field(
        default_factory=VirtualDiskPersistentVolumeClaim, alias="persistentVolumeClaim"
    )

    @model_validator(mode="after")
    def _blank_has_size(self) -> VirtualDiskSpec:
        if self.data_source is None and self.persistent_volume_claim.size is None:
            raise invalid("persistentVolumeClaim.size is required for a blank disk (no dataSource)")
        return self


class DiskTarget(ApiModel):
    """The claim the disk was written to, as shown: the daemon finds the claim by the disk's
    kind, name and uid, never by this."""

    persistent_volume_claim_name: str | None = Field(
        default=None, alias="persistentVolumeClaimName"
    )


class AttachedVirtualMachine(ApiModel):
    """A virtual machine that names the disk in its blockDeviceRefs (or whose QEMU was started
    with it)."""

    name: str | None = Field(default=None, description="The VirtualMachine's name.")
    mounted: bool | None = Field(
        default=None,
        description=(
            "Whether the VirtualMachine uses the disk now: its QEMU may have it open (it is not "
            "Stopped or Pending), so the disk cannot be deleted until it stops."
        ),
    )


class CreationDuration(ApiModel):
    """How long the disk took to make: waiting for its source, and in all."""

    waiting_for_dependencies: Duration | None = Field(default=None, alias="waitingForDependencies")
    total_provisioning: Duration | None = Field(default=None, alias="totalProvisioning")


class VirtualDiskStats(ApiModel):
    """Statistics of the disk."""

    creation_duration: CreationDuration | None = Field(default=None, alias="creationDuration")


class VirtualDiskStatus(Status):
    """What was observed of the disk."""

    phase: DiskPhase | None = None
    progress: Progress | None = None
    download_speed: StatusSpeed | None = Field(default=None, alias="downloadSpeed")
    capacity: str | None = None
    target: DiskTarget | None = None
    storage_class_name: str | None = Field(default=None, alias="storageClassName")
    stats: VirtualDiskStats | None = None
    attached_to_virtual_machines: list[AttachedVirtualMachine] | None = Field(
        default=None,
        alias="attachedToVirtualMachines",
        description=(
            "The VirtualMachines that name the disk, by name; unset when none does. The one "
            "`mounted` shows in the VirtualMachine column; the InUse condition says whether "
            "one holds it."
        ),
    )
    image_upload_urls: ImageUploadURLs | None = Field(default=None, alias="imageUploadURLs")
    source_uid: str | None = Field(default=None, alias="sourceUID")


class VirtualDisk(Resource):
    """A virtual machine disk: a claim filled from HTTP, an image, a snapshot, or left blank."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualDisk"] = "VirtualDisk"
    spec: VirtualDiskSpec
    status: VirtualDiskStatus = Field(default_factory=VirtualDiskStatus)


VIRTUAL_DISKS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualDisk",
    plural="virtualdisks",
    model=VirtualDisk,
    short_names=("vd",),
    categories=("all", "diskferry"),
    columns=(
        Column("Phase", ".status.phase"),
        Column("Capacity", ".status.capacity"),
        Column("InUse", ".status.conditions[?(@.type=='InUse')].status", priority=1),
        Column("VirtualMachine", ".status.attachedToVirtualMachines[?(@.mounted==true)].name"),
        Column("Progress", ".status.progress", priority=1),
        Column("StorageClass", ".status.storageClassName", priority=1),
        Column("TargetPVC", ".status.target.persistentVolumeClaimName", priority=1),
        AGE,
    ),
)
