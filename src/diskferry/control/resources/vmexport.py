"""VirtualMachineExport, KubeVirt's shape: a disk or a snapshot served over HTTPS for a while."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field

from diskferry.control.duration import parse_duration
from diskferry.control.kinds import Column, KindInfo
from diskferry.control.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    VERSION,
    ApiModel,
    Condition,
    Resource,
    Status,
)
from diskferry.control.resources.common import ApiVersion, Duration
from diskferry.control.resources.typedref import (
    BACKUP,
    CORE,
    KUBEVIRT,
    SNAPSHOT,
    TEMPLATE,
    Groups,
    TypedReference,
)

DEFAULT_TTL = timedelta(hours=2)
TOKEN_SECRET_PREFIX = "export-token-"


class ExportPhase(StrEnum):
    """Where an export is in its life."""

    PENDING = "Pending"
    READY = "Ready"
    TERMINATED = "Terminated"
    SKIPPED = "Skipped"


class ExportSourceKind(StrEnum):
    """The kinds an export names: diskferry's (a disk, a snapshot, a machine's disks, a Pull
    backup's point) and KubeVirt's (a PersistentVolumeClaim, a VM snapshot, a template)."""

    VIRTUAL_DISK = "VirtualDisk"
    VIRTUAL_DISK_SNAPSHOT = "VirtualDiskSnapshot"
    VIRTUAL_MACHINE = "VirtualMachine"
    VIRTUAL_MACHINE_BACKUP = "VirtualMachineBackup"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"
    VIRTUAL_MACHINE_SNAPSHOT = "VirtualMachineSnapshot"
    VIRTUAL_MACHINE_TEMPLATE = "VirtualMachineTemplate"


NOT_SERVED = (
    ExportSourceKind.VIRTUAL_MACHINE_SNAPSHOT,
    ExportSourceKind.VIRTUAL_MACHINE_TEMPLATE,
)
"""KubeVirt's kinds that have no counterpart here: their exports are Skipped, saying why."""


class ExportSource(TypedReference):
    """The object exported, in the export's namespace, named as KubeVirt or diskferry names it.

    KubeVirt's sources map to diskferry's kinds: `kubevirt.io` VirtualMachine is the
    VirtualMachine of that name; a PersistentVolumeClaim (`apiGroup` "" or unset) is a
    VirtualDisk's claim, named as the disk's `status.target.persistentVolumeClaimName` shows it
    (`vd-<disk>-<uid>`), or else the VirtualDisk of that name (as a DataVolume's claim is named
    after it); `backup.kubevirt.io` VirtualMachineBackup is a Pull backup's point, served with
    that backup's token. `snapshot.kubevirt.io` VirtualMachineSnapshot and
    `template.kubevirt.io` VirtualMachineTemplate are taken, and the export is Skipped: there is
    no VM snapshot nor template kind here (export each VirtualDiskSnapshot, or the
    VirtualMachine).
    """

    GROUPS: ClassVar[Groups] = {
        ExportSourceKind.VIRTUAL_DISK: (GROUP, None),
        ExportSourceKind.VIRTUAL_DISK_SNAPSHOT: (GROUP, None),
        ExportSourceKind.VIRTUAL_MACHINE: (KUBEVIRT, GROUP, None),
        ExportSourceKind.VIRTUAL_MACHINE_BACKUP: (BACKUP, GROUP, None),
        ExportSourceKind.PERSISTENT_VOLUME_CLAIM: (CORE, None),
        ExportSourceKind.VIRTUAL_MACHINE_SNAPSHOT: (SNAPSHOT,),
        ExportSourceKind.VIRTUAL_MACHINE_TEMPLATE: (TEMPLATE,),
    }
    kind: ExportSourceKind = Field(description="The kind of the object exported.")


class VirtualMachineExportSpec(ApiModel):
    """What to export, with which token Secret, for how long."""

    source: ExportSource
    token_secret_ref: str | None = Field(default=None, alias="tokenSecretRef", pattern=NAME_PATTERN)
    ttl_duration: Duration | None = Field(default=None, alias="ttlDuration")

    @property
    def ttl(self) -> timedelta:
        """How long the export lives after its creation: `ttlDuration`, 2h when unset."""
        return DEFAULT_TTL if self.ttl_duration is None else parse_duration(self.ttl_duration)


class ExportVolumeFormat(StrEnum):
    """The forms a volume is served in: KubeVirt's, and diskferry's zstd and extents."""

    RAW = "raw"
    GZIP = "gzip"
    DIR = "dir"
    TAR_GZ = "tar.gz"
    ZSTD = "zstd"
    EXTENTS = "extents"


class ExportManifestType(StrEnum):
    """The manifests an export serves."""

    ALL = "all"
    AUTH_HEADER_SECRET = "auth-header-secret"


class ExportVolumeFormatLink(ApiModel):
    """One format of a volume and its URL."""

    format: ExportVolumeFormat
    url: str


class ExportVolume(ApiModel):
    """A volume served, in each of its formats."""

    name: str
    formats: list[ExportVolumeFormatLink] = Field(default_factory=list)


class ExportManifest(ApiModel):
    """A manifest served, and its URL."""

    type: ExportManifestType
    url: str


class ExportBackupEndpointType(StrEnum):
    """The endpoints of a backup point's volume."""

    MAP = "map"
    DATA = "data"


class ExportBackupEndpoint(ApiModel):
    """One endpoint of a backup point's volume and its URL."""

    endpoint: ExportBackupEndpointType = Field(
        description="map (the changed or allocated extents, JSON) or data (the bytes)."
    )
    url: str = Field(description="The endpoint's URL.")


class ExportBackup(ApiModel):
    """A volume of a backup point served, with its endpoints."""

    name: str = Field(description="The volume's name (the VirtualDisk's).")
    endpoints: list[ExportBackupEndpoint] = Field(
        default_factory=list, description="Its map and data endpoints."
    )


class ExportLink(ApiModel):
    """The URLs of one way in, and the CA in PEM that verifies its host."""

    cert: str | None = None
    volumes: list[ExportVolume] = Field(default_factory=list)
    backups: list[ExportBackup] = Field(
        default_factory=list,
        description="The volumes of a backup point served (an export of a VirtualMachineBackup), "
        "each with its map and data endpoints, as KubeVirt lists them; empty for other sources.",
    )
    manifests: list[ExportManifest] = Field(default_factory=list)


class ExportLinks(ApiModel):
    """The links from this machine (internal) and through the export proxy (external)."""

    internal: ExportLink | None = None
    external: ExportLink | None = None


class ExportCondition(Condition):
    """A condition as KubeVirt's export writes it, with the time it was last probed."""

    last_probe_time: datetime | None = Field(default=None, alias="lastProbeTime")


class VirtualMachineExportStatus(Status):
    """What was observed of the export: its links, its token Secret, when it expires."""

    phase: ExportPhase | None = None
    conditions: list[ExportCondition] = Field(default_factory=list)
    links: ExportLinks | None = None
    token_secret_ref: str | None = Field(default=None, alias="tokenSecretRef")
    ttl_expiration_time: datetime | None = Field(default=None, alias="ttlExpirationTime")
    service_name: str | None = Field(default=None, alias="serviceName")
    virtual_machine_name: str | None = Field(default=None, alias="virtualMachineName")


class VirtualMachineExport(Resource):
    """An export of a disk or a snapshot, over HTTPS with a token, deleted at its TTL."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualMachineExport"] = "VirtualMachineExport"
    spec: VirtualMachineExportSpec
    status: VirtualMachineExportStatus = Field(default_factory=VirtualMachineExportStatus)

    @property
    def token_secret_name(self) -> str:
        """The Secret holding the token: `spec.tokenSecretRef`, or `export-token-<name>`."""
        return self.spec.token_secret_ref or f"{TOKEN_SECRET_PREFIX}{self.metadata.name}"


VIRTUAL_MACHINE_EXPORTS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachineExport",
    plural="virtualmachineexports",
    model=VirtualMachineExport,
    short_names=("vmexport", "vmexports"),
    categories=("all", "diskferry"),
    columns=(
        Column("SourceKind", ".spec.source.kind"),
        Column("SourceName", ".spec.source.name"),
        Column("Phase", ".status.phase"),
    ),
)
