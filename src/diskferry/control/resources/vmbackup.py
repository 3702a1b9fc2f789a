"""VirtualMachineBackup, KubeVirt's backup API shape: one backup point of a VM's disks, pushed
into a BackupStorageLocation's repository or served for a client to pull until its TTL.

Push writes into the repository `spec.storageLocation` names, or KubeVirt's `pvcName` (where
KubeVirt writes qcow2 files into a PVC): the diskferry target of a backup is a repository, as
a Backup's is. Pull serves each disk's map and data endpoints behind the token of
`spec.tokenSecretRef`, through a VirtualMachineExport as KubeVirt does. The spec is fixed at
creation, as KubeVirt's.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from diskferry.control.resources.common import ApiVersion, Duration
from diskferry.control.resources.duration import parse_duration
from diskferry.control.resources.kinds import Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Condition,
    Resource,
    Status,
)
from diskferry.control.resources.typedref import BACKUP, Groups, TypedReference
from diskferry.control.resources.vmbackuptracker import (
    MACHINE_GROUPS,
    BackupSourceKind,
    BackupVolumeInfo,
)

DEFAULT_TTL = timedelta(hours=2)
TOKEN_SECRET_PREFIX = "backup-token-"


class BackupMode(StrEnum):
    """How the backup's output is received."""

    PUSH = "Push"
    PULL = "Pull"


class BackupType(StrEnum):
    """Whether the backup holds the whole disks or what changed since the checkpoint."""

    FULL = "Full"
    INCREMENTAL = "Incremental"


class BackupConditionType(StrEnum):
    """The conditions a backup reports."""

    PROGRESSING = "Progressing"
    COMPLETE = "Complete"
    FAILED = "Failed"
    QUIESCED = "Quiesced"


class BackupPhase(StrEnum):
    """Where a backup is, beyond KubeVirt (which has conditions only): a column to print."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    READY = "Ready"
    COMPLETE = "Complete"
    FAILED = "Failed"


ENDED = (BackupPhase.COMPLETE, BackupPhase.FAILED)


class BackupSource(TypedReference):
    """The VM backed up, or the tracker that names it and the checkpoint to start from, named
    as KubeVirt writes them (kubevirt.io VirtualMachine, backup.kubevirt.io
    VirtualMachineBackupTracker) or as diskferry does (diskferry.io, or no apiGroup)."""

    GROUPS: ClassVar[Groups] = {
        BackupSourceKind.VIRTUAL_MACHINE: MACHINE_GROUPS,
        BackupSourceKind.VIRTUAL_MACHINE_BACKUP_TRACKER: (BACKUP, GROUP, None),
    }
    kind: BackupSourceKind = Field(
        description="VirtualMachine (a full backup) or VirtualMachineBackupTracker (incremental "
        "from its latest checkpoint, which the backup moves on)."
    )


class VirtualMachineBackupSpec(ApiModel):
    """What to back up, how, and where (Push) or for how long and with which token (Pull)."""

    source: BackupSource
    mode: BackupMode = Field(
        default=BackupMode.PUSH,
        description="Push (the default): the point is written into a BackupStorageLocation's "
        "repository (through a DataUpload vmbackup-<name>). Pull: the point is served, each "
        "disk's map and data endpoints behind a token, until ttlDuration, for a client to "
        "read.",
    )
    storage_location: str | None = Field(
        default=None,
        alias="storageLocation",
        pattern=NAME_PATTERN,
        description="Push: the BackupStorageLocation whose repository receives the backup.",
    )
    pvc_name: str | None = Field(
        default=None,
        alias="pvcName",
        pattern=NAME_PATTERN,
        description="KubeVirt's PVC that receives a Push backup (KubeVirt writes one qcow2 file "
        "per disk into it) or holds a Pull backup's scratch files. Push: a backup's target here "
        "is a repository, so this names the BackupStorageLocation that receives it when "
        "storageLocation is unset (the same one when both are set), and the backup waits until "
        "a BackupStorageLocation of that name exists, as KubeVirt waits for the PVC; restore it "
        "with a DataDownload or a Restore. Pull: not used, the point's scratch is kept in the "
        "daemon's data directory.",
    )
    skip_quiesce: bool = Field(
        default=False,
        alias="skipQuiesce",
        description="true: the guest's filesystems are not frozen through its guest agent "
        "around the point (the Quiesced condition says QuiesceSkipped). Default false: frozen "
        "when the VM runs and its agent answers.",
    )
    force_full_backup: bool = Field(
        default=False,
        alias="forceFullBackup",
        description="true: every disk is read whole, even from a tracker's checkpoint. "
        "Default false: Incremental from the tracker's latest checkpoint where the disks' "
        "chains allow.",
    )
    token_secret_ref: str | None = Field(
        default=None,
        alias="tokenSecretRef",
        pattern=NAME_PATTERN,
        description="Pull: the Secret, in the backup's namespace, whose key `token` is the "
        "token the endpoints check (header x-kubevirt-export-token). Default: a Secret "
        "backup-token-<name> made with a random token and deleted with the backup. Push: not "
        "used.",
    )
    ttl_duration: Duration | None = Field(
        default=None,
        alias="ttlDuration",
        description="Pull: how long the point is served from the backup's creation, as a Go "
        "duration (2h, 90m); then the backup is Complete and its checkpoint recorded. Default "
        "2h. Push: not used.",
    )

    @model_validator(mode="after")
    def _target(self) -> VirtualMachineBackupSpec:
        if self.mode != BackupMode.PUSH:
            return self
        if not (self.storage_location or self.pvc_name):
            raise PydanticCustomError(
                "storage_location", "a Push backup needs spec.storageLocation or spec.pvcName"
            )
        if self.storage_location and self.pvc_name and self.storage_location != self.pvc_name:
            raise PydanticCustomError(
                "storage_location",
                "spec.storageLocation and spec.pvcName name different BackupStorageLocations: "
                "set one of them",
            )
        return self

    @property
    def location(self) -> str | None:
        """The BackupStorageLocation a Push backup goes into: `storageLocation`, else
        `pvcName`; None for Pull."""
        if self.mode != BackupMode.PUSH:
            return None
        return self.storage_location or self.pvc_name

    @property
    def ttl(self) -> timedelta:
        """How long a Pull backup is served after its creation: `ttlDuration`, 2h when unset."""
        return DEFAULT_TTL if self.ttl_duration is None else parse_duration(self.ttl_duration)


class BackupVolumeLink(ApiModel):
    """The endpoints of one volume on one way in."""

    volume_name: str = Field(alias="volumeName", description="The VirtualDisk's name.")
    data_endpoint: str = Field(
        alias="dataEndpoint",
        description="The URL of the disk's bytes at the point (GET, ?offset=&length= for a part).",
    )
    map_endpoint: str = Field(
        alias="mapEndpoint",
        description="The URL of the disk's extent map (JSON runs of data, zero or dirty, "
        "paged by ?offset=&length=&page_size=).",
    )


class BackupLink(ApiModel):
    """The CA that verifies one way in, and each volume's endpoints on it."""

    cert: str = Field(
        description="PEM certificates of the CA that signed the server's TLS certificate: the "
        "one to trust for these URLs."
    )
    volumes: list[BackupVolumeLink] = Field(
        default_factory=list, description="Each disk's endpoints."
    )


class BackupLinks(ApiModel):
    """Pull: where the point is served while the backup is Ready; removed at its end."""

    internal: BackupLink | None = Field(
        default=None,
        description="The endpoints of the backup's own server, on 127.0.0.1 of the daemon's host.",
    )
    external: BackupLink | None = Field(
        default=None,
        description="The endpoints through the export proxy, as the backup's "
        "VirtualMachineExport lists them.",
    )


class VirtualMachineBackupStatus(Status):
    """What was observed of the backup: full or incremental, its checkpoint, its endpoints."""

    phase: BackupPhase | None = Field(
        default=None,
        description="Beyond KubeVirt, which has conditions only: Pending (waiting for the VM's "
        "disks, or a Push's BackupStorageLocation), Progressing (the point being taken and, "
        "for Push, moved), Ready (Pull: the endpoints answer), Complete, Failed (the Failed "
        "condition's reason and message say why).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="KubeVirt's conditions: Progressing (until the end), Complete, Failed, "
        "and Quiesced (whether the guest's filesystems were frozen at the point).",
    )
    type: BackupType | None = Field(
        default=None,
        description="Full (a disk was read whole: the source is the VM itself, "
        "forceFullBackup, no checkpoint yet, or a broken chain, as the message says) or "
        "Incremental (every disk read only where it changed since the checkpoint), as made.",
    )
    checkpoint_name: str | None = Field(
        default=None,
        alias="checkpointName",
        description="The checkpoint this backup made, which the next incremental one starts "
        "from; unset when the VM's disks have no changed-block tracking.",
    )
    endpoint_cert: str | None = Field(
        default=None,
        alias="endpointCert",
        description="Pull: PEM certificates of the CA to trust for the external endpoints.",
    )
    included_volumes: list[BackupVolumeInfo] = Field(
        default_factory=list, alias="includedVolumes", description="The VM's disks backed up."
    )
    links: BackupLinks | None = None
    token_secret_ref: str | None = Field(
        default=None,
        alias="tokenSecretRef",
        description="Pull: the Secret whose key `token` the endpoints check.",
    )
    data_upload_name: str | None = Field(
        default=None,
        alias="dataUploadName",
        description="Push: the DataUpload (vmbackup-<name>, owned by the backup) that moves "
        "the point into the repository.",
    )
    snapshot_id: str | None = Field(
        default=None,
        alias="snapshotID",
        description="Push: the backup's id in the repository, as its DataUpload reports it.",
    )
    export_uid: str | None = Field(
        default=None,
        alias="exportUID",
        description="Pull: the uid of the VirtualMachineExport (named as the backup, owned by "
        "it) that serves the point through the export proxy.",
    )


class VirtualMachineBackup(Resource):
    """A backup point of a VM's disks, pushed into a repository or served to be pulled.

    KubeVirt's shape; the spec is fixed at creation. Push writes into the repository of the
    BackupStorageLocation spec.storageLocation, or else of the one named by KubeVirt's
    spec.pvcName (where KubeVirt writes qcow2 files into a PVC, a backup's target here is a
    repository), waiting (Pending, condition Progressing with the reason Initializing) until a
    location of that name exists, as KubeVirt waits for the PVC; it goes through one DataUpload
    vmbackup-NAME that it owns. Restore it with a DataDownload or a Restore.

    Pull checkpoints the VM's disks in one backup session and serves each fleecing view
    (/exports/VOLUME/map, /exports/VOLUME/data) on 127.0.0.1 until the TTL, counted from the
    creation. As KubeVirt, the backup makes a VirtualMachineExport of itself (named as the backup,
    owned by it, with the backup's token and the rest of its TTL) which routes the export proxy to
    it and lists KubeVirt's `links.*.backups`; the backup is Ready (reason ExportReady) once its
    export is, and deletes it at its end; then the session ends.

    The backup is Incremental from the tracker's latest checkpoint unless forceFullBackup, the
    source is the VM itself, or the tracker has none; at the end the tracker's latestCheckpoint is
    the backup's. The draft shape of KubeVirt's VEP (spec.backupTracker, lowercase push and pull)
    is refused, as KubeVirt refuses it.
    """

    CONDITIONS = {
        BackupConditionType.PROGRESSING: "True from the backup's first step until it ends, "
        "its reason saying where it is (Initializing while it waits for its location); False "
        "once it is Complete or Failed.",
        BackupConditionType.COMPLETE: "Written when the backup ends: True when the point was "
        "taken (and, for Push, moved into the repository), False when it Failed.",
        BackupConditionType.FAILED: "Written when the backup ends: True when it failed, the "
        "reason and message saying why; False when it is Complete.",
        BackupConditionType.QUIESCED: "True (QuiesceSucceeded) when the guest's filesystems "
        "were frozen at the point; False when they were not: QuiesceSkipped (skipQuiesce) or "
        "QuiesceFailed (the guest agent did not freeze them).",
        **RECONCILED_CONDITION,
    }

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualMachineBackup"] = "VirtualMachineBackup"
    spec: VirtualMachineBackupSpec
    status: VirtualMachineBackupStatus = Field(default_factory=VirtualMachineBackupStatus)

    @property
    def token_secret_name(self) -> str:
        """The Secret holding the Pull token: `spec.tokenSecretRef`, or `backup-token-<name>`."""
        return self.spec.token_secret_ref or f"{TOKEN_SECRET_PREFIX}{self.metadata.name}"


VIRTUAL_MACHINE_BACKUPS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachineBackup",
    plural="virtualmachinebackups",
    model=VirtualMachineBackup,
    short_names=("vmbackup", "vmbackups"),
    categories=("diskferry",),
    columns=(
        Column("SourceKind", ".spec.source.kind"),
        Column("SourceName", ".spec.source.name"),
        Column("Type", ".status.type"),
        Column("CheckpointName", ".status.checkpointName"),
        Column("Mode", ".spec.mode"),
        Column("Phase", ".status.phase"),
    ),
)
