"""VirtualMachineExport, KubeVirt's shape: a disk or a snapshot served over HTTPS for a while."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Literal

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

DEFAULT_TTL = timedelta(hours=2)
TOKEN_SECRET_PREFIX = "export-token-"


class ExportPhase(StrEnum):
    """Where an export is in its life."""

    PENDING = "Pending"
    READY = "Ready"
    TERMINATED = "Terminated"
    SKIPPED = "Skipped"


class ExportSourceKind(StrEnum):
    """The kinds an export names: a disk, a snapshot, or a machine's disks."""

    VIRTUAL_DISK = "VirtualDisk"
    VIRTUAL_DISK_SNAPSHOT = "VirtualDiskSnapshot"
    VIRTUAL_MACHINE = "VirtualMachine"


class ExportSource(ApiModel):
    """The object exported, in the export's namespace."""

    api_group: Literal["diskferry.io"] | None = Field(default=None, alias="apiGroup")
    kind: ExportSourceKind
    name: str = Field(min_length=1)


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


class ExportLink(ApiModel):
    """The URLs of one way in, and the CA in PEM that verifies its host."""

    cert: str | None = None
    volumes: list[ExportVolume] = Field(default_factory=list)
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
