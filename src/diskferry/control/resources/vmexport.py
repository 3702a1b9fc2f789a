"""VirtualMachineExport, KubeVirt's shape: a disk or a snapshot served over HTTPS for a while."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field

from diskferry.control.resources.common import ApiVersion, Duration
from diskferry.control.resources.duration import parse_duration
from diskferry.control.resources.kinds import Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    READY,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Condition,
    Resource,
    Status,
)
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
EXTERNAL_LINKS = "ExternalLinks"
"""The condition that says why an export has no external links."""
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
    token_secret_ref: str | None = Field(
        default=None,
        alias="tokenSecretRef",
        pattern=NAME_PATTERN,
        description="The Secret, in the export's namespace, whose key `token` is the token "
        "clients send (header x-kubevirt-export-token, or the query parameter of that name); "
        "the export stays Pending while it or its key is missing. Default: a Secret "
        "export-token-<name> made with a random token and deleted with the export.",
    )
    ttl_duration: Duration | None = Field(
        default=None,
        alias="ttlDuration",
        description="How long the export lives from its creation, as a Go duration (2h, "
        "90m); then it is Terminated and deleted. Default 2h.",
    )

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

    format: ExportVolumeFormat = Field(
        description="raw (the disk's bytes, disk.img: HEAD and Range work), gzip "
        "(disk.img.gz), zstd (disk.img.zst) for a disk; dir (a listing) and tar.gz for a "
        "volume of files."
    )
    url: str = Field(description="Where to GET the volume in that format.")


class ExportVolume(ApiModel):
    """A volume served, in each of its formats."""

    name: str = Field(
        description="The volume's name: the VirtualDisk's or the VirtualDiskSnapshot's, or "
        "the PersistentVolumeClaim's as the source names it."
    )
    formats: list[ExportVolumeFormatLink] = Field(
        default_factory=list, description="The formats it is served in, each with its URL."
    )


class ExportManifest(ApiModel):
    """A manifest served, and its URL."""

    type: ExportManifestType = Field(
        description="all (the VirtualMachine and its VirtualDisks, made to import from this "
        "export) or auth-header-secret (a Secret holding the token header); KubeVirt's oci "
        "is not served."
    )
    url: str = Field(description="Where to GET the manifest (JSON, or YAML when asked).")


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

    cert: str | None = Field(
        default=None,
        description="PEM certificates of the CA that signed the server's TLS certificate: the "
        "one to trust for these URLs.",
    )
    volumes: list[ExportVolume] = Field(
        default_factory=list, description="The volumes served, in each of their formats."
    )
    backups: list[ExportBackup] = Field(
        default_factory=list,
        description="The volumes of a backup point served (an export of a VirtualMachineBackup), "
        "each with its map and data endpoints, as KubeVirt lists them; empty for other sources.",
    )
    manifests: list[ExportManifest] = Field(
        default_factory=list, description="The manifests served, each with its URL."
    )


class ExportLinks(ApiModel):
    """Where to fetch what is exported, once the export is Ready; removed when it is
    Terminated."""

    internal: ExportLink | None = Field(
        default=None,
        description="URLs of the export's own server: on 127.0.0.1 of the daemon's host; in a "
        "cluster, through its headless Service, https://<serviceName>.<namespace>.svc:8443.",
    )
    external: ExportLink | None = Field(
        default=None,
        description="URLs through the export proxy, under /api/export.kubevirt.io/v1/"
        "namespaces/<namespace>/virtualmachineexports/<name>/, for clients elsewhere: in a "
        "cluster on the host of the proxy's Route or of an Ingress to its Service, absent "
        "without either (the condition ExternalLinks says so).",
    )


class ExportCondition(Condition):
    """A condition as KubeVirt's export writes it, with the time it was last probed."""

    last_probe_time: datetime | None = Field(
        default=None,
        alias="lastProbeTime",
        description="When the condition was last checked (KubeVirt's field); not set here.",
    )


class VirtualMachineExportStatus(Status):
    """What was observed of the export: its links, its token Secret, when it expires."""

    phase: ExportPhase | None = Field(
        default=None,
        description="Pending (the source or the token Secret is not there or not Ready, a "
        "VirtualMachine runs, or the server is starting), Ready (the server answers at "
        "`links`), Terminated (the TTL is reached or the export is being deleted: the server "
        "stopped, the links removed), Skipped (a source with no counterpart here: "
        "VirtualMachineSnapshot, VirtualMachineTemplate, or a Push VirtualMachineBackup; "
        "nothing is served until the TTL).",
    )
    conditions: list[ExportCondition] = Field(
        default_factory=list,
        description="What was last observed about the export, one entry per condition type.",
    )
    links: ExportLinks | None = None
    token_secret_ref: str | None = Field(
        default=None,
        alias="tokenSecretRef",
        description="The Secret whose key `token` the server checks: spec's, the one made "
        "for the export, or a VirtualMachineBackup's.",
    )
    ttl_expiration_time: datetime | None = Field(
        default=None,
        alias="ttlExpirationTime",
        description="When the export is Terminated and deleted: its creation plus its TTL.",
    )
    service_name: str | None = Field(
        default=None,
        alias="serviceName",
        description="The name KubeVirt gives the Service in front of the export server "
        "(virt-export-<name>), shown for KubeVirt's clients; the server is reached at `links`.",
    )
    virtual_machine_name: str | None = Field(
        default=None,
        alias="virtualMachineName",
        description="The VirtualMachine whose disks are served (a VirtualMachine or a "
        "VirtualMachineBackup source).",
    )


class VirtualMachineExport(Resource):
    """An export of a disk or a snapshot, over HTTPS with a token, deleted at its TTL.

    Each export is served by an export worker on 127.0.0.1 with a port of its own (kept in the
    annotation diskferry.io/export-port, so a server started again keeps its links); its
    certificate comes from the daemon's CA (DATA_DIR/pki), lives 24 hours and is renewed at half
    its life without cutting downloads. The external links go through the export proxy, which the
    daemon runs on https://127.0.0.1:7444 (`diskferry serve --proxy-port`) while there is an
    export, under /api/export.kubevirt.io/v1/namespaces/NAMESPACE/virtualmachineexports/NAME/
    (KubeVirt's current version; v1beta1 is routed too).

    In a cluster (`diskferry operator`) the server is a Pod, its claims read-only, behind the
    headless Service `serviceName` on 8443 (the internal links), its certificate from the CA in
    the Secret diskferry-export-ca; the Pod, its Secret and the Service are owned by the
    export. The external links go through deploy/'s export proxy, on the host of its Route or
    of an Ingress to its Service; with neither they are absent, and the condition
    ExternalLinks says why.

    The export is Ready once its server answers; an export of a source that is not there or not
    Ready is Pending without links, its condition saying why. An export of a VirtualMachine serves
    all its VirtualDisks (one volume each) while the VM is stopped; while it runs the export is
    Pending with the reason InUse, as KubeVirt keeps it, since the disks change under the readers.
    An export of a Pull VirtualMachineBackup starts no server: it is routed through the proxy to
    the backup's and lists each volume's map and data endpoints in `links.*.backups`, behind the
    backup's token (a tokenSecretRef holding another token keeps it Pending, reason
    TokenNotReady); of a Push backup it is Skipped. A VirtualMachineSnapshot or
    VirtualMachineTemplate source is Skipped with a Ready=False condition (reason
    SourceNotServed) saying what to export instead.

    The manifests are served as KubeVirt's export server serves them: a JSON v1 List, or YAML
    documents each ended by `---` with `Accept: application/yaml` (as virtctl asks).
    auth-header-secret is the Secret header-secret-NAME that CDI reads; an export of a
    VirtualMachine also serves all: the VM (its name, namespace, labels, annotations and spec) and
    each of its VirtualDisks filled over HTTP from this export's gzip URL of it, on the side asked,
    with that side's CA as caBundle and the token in the URL's query (a VirtualDisk names no header
    Secret, as CDI's DataVolume does): `kubectl apply` it elsewhere to make the VM again. Not
    served: v1's oci manifest, and the CA ConfigMap KubeVirt's all carries (the disks take the CA
    inline).

    At the TTL, as KubeVirt, the export's server is stopped, its route dropped, and the export goes
    Terminated (condition Ready=False, reason Expired, an Event) with its links removed; it is then
    deleted. An export being deleted is Terminated without links too.
    """

    CONDITIONS = {
        READY: "True (ExportReady) while the export's server answers at status.links. False "
        "while it is Pending, Skipped or Terminated, the reason saying why (InUse, "
        "TokenNotReady, Starting, SourceNotServed, Expired...).",
        EXTERNAL_LINKS: "False (NoExternalHost) while the export is Ready without "
        "status.links.external: in a cluster, no Route nor Ingress leads to the export proxy's "
        "Service, so clients elsewhere cannot reach it; absent while there are external links.",
        **RECONCILED_CONDITION,
    }

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
