"""VirtualDataExport, Deckhouse's shape (`vde`): a disk or a snapshot to download once, over
HTTPS with a token, until nobody has downloaded it for `idleTimeout`."""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.resources.common import ApiVersion, Duration
from diskferry.control.resources.duration import parse_duration
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
    Status,
)

DEFAULT_IDLE_TIMEOUT = "30m"
COMPLETED = "Completed"
"""The one condition Deckhouse's VirtualDataExport has: True once the data was downloaded."""


class DataExportTargetKind(StrEnum):
    """The kinds a VirtualDataExport names: Deckhouse's four, and a PersistentVolumeClaim (a
    VirtualDisk's claim, as Deckhouse's DataExport takes one)."""

    VIRTUAL_DISK = "VirtualDisk"
    VIRTUAL_DISK_SNAPSHOT = "VirtualDiskSnapshot"
    VIRTUAL_IMAGE = "VirtualImage"
    CLUSTER_VIRTUAL_IMAGE = "ClusterVirtualImage"
    PERSISTENT_VOLUME_CLAIM = "PersistentVolumeClaim"


class DataExportPhase(StrEnum):
    """Where the export is: the `Completed` condition's reason, shown in the Phase column."""

    PENDING = "Pending"
    WAIT_FOR_USER_DOWNLOAD = "WaitForUserDownload"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    EXPIRED = "Expired"
    FAILED = "Failed"


class DataExportTargetRef(ApiModel):
    """The object whose data is served, in the export's namespace."""

    kind: DataExportTargetKind = Field(
        description="VirtualDisk, VirtualDiskSnapshot, VirtualImage or ClusterVirtualImage (as "
        "Deckhouse), or PersistentVolumeClaim: a VirtualDisk's claim (`vd-<disk>-<uid>`, as the "
        "disk's status.target.persistentVolumeClaimName shows it) or else the VirtualDisk of "
        "that name. An image is not served here (the export Fails saying so): make a "
        "VirtualDisk from it and export the disk."
    )
    name: str = Field(pattern=NAME_PATTERN, description="The object's name.")


class VirtualDataExportSpec(ApiModel):
    """What to serve, and how long to wait for a download."""

    idle_timeout: Duration = Field(
        default=DEFAULT_IDLE_TIMEOUT,
        alias="idleTimeout",
        description="How long the export is served with no download under way, as a duration "
        "(`1h`, `30m`, `60s`); default 30m. Counted from when its URL is ready, and again from "
        "the end of each download: with nothing downloaded by then the export is Expired, "
        "after a download it stays Completed; either way its server is stopped and `url` "
        "cleared.",
    )
    target_ref: DataExportTargetRef = Field(
        alias="targetRef", description="The disk, snapshot or claim to serve."
    )

    @property
    def idle(self) -> timedelta:
        """`idleTimeout` as a time."""
        return parse_duration(self.idle_timeout)


class VirtualDataExportStatus(Status):
    """What was observed of the export: its URL, the CA that verifies it and where its token is."""

    phase: DataExportPhase | None = Field(
        default=None,
        description="Pending, WaitForUserDownload, InProgress, Completed, Expired or Failed: the "
        "Completed condition's reason (Deckhouse prints a Phase column of this path).",
    )
    url: str | None = Field(
        default=None,
        description="The raw disk's URL through the export proxy, set while the export is "
        "served; give the token in the `x-kubevirt-export-token` header or query.",
    )
    ca: str | None = Field(
        default=None,
        description="The CA certificate that verifies the URL's host, PEM in base64, as "
        "Deckhouse's DataExport gives it.",
    )
    token_secret_ref: str | None = Field(
        default=None,
        alias="tokenSecretRef",
        description="The Secret whose data.token the URL takes (diskferry's: Deckhouse checks the "
        "user's own Kubernetes token instead).",
    )
    export_name: str | None = Field(
        default=None,
        alias="virtualMachineExportName",
        description="The VirtualMachineExport that serves the data, owned by this export and "
        "deleted with it (diskferry's).",
    )


class VirtualDataExport(Resource):
    """A download of a disk or a snapshot, ended after `idleTimeout` without one.

    Deckhouse's download of a disk, as `d8 v export create` makes it. It makes and owns a
    VirtualMachineExport vde-NAME (deleted with it) and shows that export's raw disk URL through
    the export proxy in status.url, the CA in status.ca and the token's Secret in
    status.tokenSecretRef: `curl --cacert ca.pem -H "x-kubevirt-export-token: $TOKEN" -o disk.img
    "$URL"`. The idle timeout counts from the requests the export server let in.
    """

    CONDITIONS = {
        COMPLETED: "True once the data was downloaded (reason Completed); False before and "
        "after, its reason the phase (Pending, WaitForUserDownload, InProgress, Expired, "
        "Failed) and its message why.",
        **RECONCILED_CONDITION,
    }

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualDataExport"] = "VirtualDataExport"
    spec: VirtualDataExportSpec
    status: VirtualDataExportStatus = Field(default_factory=VirtualDataExportStatus)


VIRTUAL_DATA_EXPORTS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualDataExport",
    plural="virtualdataexports",
    model=VirtualDataExport,
    short_names=("vde", "vdes"),
    categories=("all", "diskferry"),
    columns=(Column("Phase", ".status.phase"), AGE),
)
