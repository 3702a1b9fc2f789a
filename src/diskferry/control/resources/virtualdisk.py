"""VirtualDisk: a disk in a claim of a StorageClass, blank or filled from a data source."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

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
from diskferry.control.resources.quantity import parse_quantity


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
    VIRTUAL_DISK = "VirtualDisk"


class VirtualDiskObjectRef(ObjectRef):
    """An image, a snapshot or another disk whose data fills the disk; it is waited for until
    it is Ready (a disk, also until no running VirtualMachine holds it)."""

    kind: VirtualDiskObjectRefKind = Field(
        description="VirtualImage, ClusterVirtualImage or VirtualDiskSnapshot, as Deckhouse's "
        "disks take them, or VirtualDisk (diskferry's, as CDI clones a PVC: a disk of the "
        "namespace copied as it is, once no running VirtualMachine holds it; in a cluster, "
        "read over NBD from a Pod beside its claim, which may be on another node); required."
    )


class VirtualDiskDataSource(DataSource):
    """Where the disk's data comes from: `type` and the one sub-object of that type. Unset: a
    blank disk of `persistentVolumeClaim.size`."""

    object_ref: VirtualDiskObjectRef | None = Field(default=None, alias="objectRef")


class VirtualDiskPersistentVolumeClaim(ApiModel):
    """The claim that holds the disk: its StorageClass (the default one when unset) and size."""

    storage_class_name: str | None = Field(
        default=None,
        alias="storageClassName",
        description="The StorageClass the claim is made in. Default: the class annotated "
        'storageclass.kubernetes.io/is-default-class: "true" (`local` on a new daemon); while '
        "the class does not exist, the disk stays Pending. May change while the disk is "
        "Pending, fixed afterwards (Deckhouse's migrates the disk to the new class).",
    )
    size: Quantity | None = Field(
        default=None,
        description="The disk's size, a quantity of bytes: a number with an optional suffix "
        "Ki, Mi, Gi, Ti (powers of 1024) or k, M, G, T (powers of 1000), such as 10Gi. "
        "Default: the size of the source's data (an image's unpacked size); required for a "
        "blank disk and in a block StorageClass. Once the disk has left Pending it may only "
        "grow: a Ready disk is then Resizing until its claim has the new size.",
    )

    @property
    def size_bytes(self) -> int | None:
        """The size in bytes, None when unset."""
        return None if self.size is None else parse_quantity(self.size)


class VirtualDiskSpec(ApiModel):
    """The disk wanted: a claim and, unless blank, a data source."""

    data_source: VirtualDiskDataSource | None = Field(default=None, alias="dataSource")
    persistent_volume_claim: VirtualDiskPersistentVolumeClaim = Field(
        default_factory=VirtualDiskPersistentVolumeClaim,
        alias="persistentVolumeClaim",
        description="The claim that holds the disk: its StorageClass and size.",
    )

    @model_validator(mode="after")
    def _blank_has_size(self) -> VirtualDiskSpec:
        if self.data_source is None and self.persistent_volume_claim.size is None:
            raise invalid("persistentVolumeClaim.size is required for a blank disk (no dataSource)")
        return self


class DiskTarget(ApiModel):
    """What was made for the disk: its claim."""

    persistent_volume_claim_name: str | None = Field(
        default=None,
        alias="persistentVolumeClaimName",
        description="The claim's name, vd-<disk>-<uid> as Deckhouse names it.",
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
    """How long the disk took to make, each from its creation, as Go durations (1m30s)."""

    waiting_for_dependencies: Duration | None = Field(
        default=None,
        alias="waitingForDependencies",
        description="Until its source (an image or a snapshot) was Ready and the copy began; "
        "unset when it did not wait.",
    )
    total_provisioning: Duration | None = Field(
        default=None, alias="totalProvisioning", description="Until the disk was Ready."
    )


class VirtualDiskStats(ApiModel):
    """Statistics of the disk."""

    creation_duration: CreationDuration | None = Field(default=None, alias="creationDuration")


class VirtualDiskStatus(Status):
    """What was observed of the disk."""

    phase: DiskPhase | None = Field(
        default=None,
        description="Pending (waiting for its StorageClass or its source; the spec may still "
        "change), Provisioning (its claim made and being filled), WaitForUserUpload (an "
        "Upload source waits for the upload at imageUploadURLs), Ready (the claim holds the "
        "data), Resizing (the claim grows to a larger size), Failed (the Ready condition's "
        "reason and message say why), PVCLost (the claim is gone), Terminating (being "
        "deleted). Deckhouse's WaitForFirstConsumer, Exporting and Migrating do not occur "
        "here.",
    )
    progress: Progress | None = Field(
        default=None,
        description="How much of the data is in the claim while it is filled, 0% to 100% "
        "(42.5%); 100% once Ready.",
    )
    download_speed: StatusSpeed | None = Field(default=None, alias="downloadSpeed")
    capacity: str | None = Field(
        default=None,
        description="The claim's size as a quantity (64Mi, 10Gi), set when the disk is Ready "
        "and after each resize.",
    )
    target: DiskTarget | None = None
    storage_class_name: str | None = Field(
        default=None,
        alias="storageClassName",
        description="The StorageClass the claim was made in: spec's, or the default class.",
    )
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
    source_uid: str | None = Field(
        default=None,
        alias="sourceUID",
        description="The uid of the image or snapshot the disk's data was copied from.",
    )


class VirtualDisk(Resource):
    """A virtual machine disk: a claim filled from HTTP, an image, a snapshot, or left blank.

    The disk grows to the claim's whole size. A source that is not Ready yet is waited for, the
    disk Pending. An Upload source runs an upload server (a worker whose certificate comes from the
    daemon's CA, DATA_DIR/pki/ca.crt; in a cluster an uploader Pod on port 8443 behind a headless
    Service of its name) and the disk waits in WaitForUserUpload, its URLs in
    status.imageUploadURLs (Deckhouse's shape: PUT or POST the image there; the path is the
    credential), until the upload is in or the disk is deleted. An image in a format other than
    raw is staged in a scratch file and then converted into the claim, so its progress counts 0-50%
    for the staging and 50-100% for the conversion.

    Deleting the disk stops its worker with SIGTERM and removes its claim (unless its StorageClass
    says Retain), its CBT overlay and its files; a finalizer holds the disk until then, and a disk
    a running VirtualMachine holds waits, Terminating, until the VM stops.
    """

    CONDITIONS = {
        READY: "True while the disk is Ready: its claim holds its data. False in every other "
        "phase, the reason saying why (what a Pending disk waits for, Provisioning, Resizing, "
        "PVCLost, a failure's reason).",
        IN_USE: "True (AttachedToVirtualMachine, naming the VMs) while a VirtualMachine holds "
        "the disk, whose deletion then waits; False (NotInUse) once none does.",
        **RECONCILED_CONDITION,
    }

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
