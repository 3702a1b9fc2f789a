"""The export engine's jobs and their results, shared by the CLI and the worker: an export
server and the export proxy. Durations are in seconds."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from diskferry.base.cpus import usable_cpus
from diskferry.export.cluster_api import ClusterApi
from diskferry.export.links import LinkedVolume, backup_link, link_set, manifest_links
from diskferry.serving.listening import Listening
from diskferry.worker.job import JobModel, WorkerJob

MAX_DEFAULT_PROXY_PROCESSES = 4


class ExportPhase(StrEnum):
    """What an export server or the proxy is doing."""

    STARTING = "Starting"
    SERVING = "Serving"
    DRAINING = "Draining"


class ExportVolumeSpec(JobModel):
    """One volume of an export: a file, block device, directory or NBD URL, and for an NBD
    volume the dirty bitmap its map shows, or the raw volume under a backup point's
    export, whose holes its map shows; `quiescent` says that nothing writes the disk while
    the export lives, so that the raw volume also holds the point's bytes."""

    name: str = Field(pattern=r"^[^/]+$")
    path: str
    bitmap: str | None = None
    data_file: str | None = Field(default=None, alias="dataFile")
    quiescent: bool = False


class LinkSettings(JobModel):
    """The export's base URLs inside the cluster and through the proxy, and where its links go."""

    internal_url: str = Field(alias="internalUrl")
    external_url: str = Field(alias="externalUrl")
    external_ca: str | None = Field(
        default=None, alias="externalCa", description="CA (PEM) of the external URL"
    )
    file: str | None = Field(default=None, description="write the status links here (JSON)")

    def point_links(self, ca_pem: str, volumes: Sequence[str]) -> dict[str, Any]:
        """The `internal` and `external` links of a backup point's server under these base URLs:
        each side with the CA `ca_pem`, the map and data endpoints of each of `volumes`, and
        the header Secret."""
        sides = {"internal": self.internal_url, "external": self.external_url}
        return {
            side: {
                "cert": ca_pem,
                "backups": [backup_link(base, volume) for volume in volumes],
                "manifests": manifest_links(base, side, has_manifest=False),
            }
            for side, base in sides.items()
        }

    def disk_links(
        self, side: str, ca_pem: str | None, disks: Sequence[str], has_manifest: bool
    ) -> dict[str, Any]:
        """The links of `side` (internal or external, under its base URL) of a server of the
        `disks`, with the CA `ca_pem` (None: the one its clients trust already): each disk in
        its formats, the manifests (the VM's too with `has_manifest`), no backup endpoints."""
        base = self.internal_url if side == "internal" else self.external_url
        volumes = [LinkedVolume(disk, disk=True) for disk in disks]
        found = link_set(base, side, ca_pem, volumes, has_manifest)
        return {key: found[key] for key in ("cert", "volumes", "manifests")}


class ExportJob(WorkerJob, Listening):
    """What `diskferry export serve` and the worker run: one export's volumes over HTTPS.

    The token is read from `tokenFile` on every request; a job holds no token inline.
    """

    # the path the server answers readiness on, without a token
    READY_PATH: ClassVar[str] = "/exportready"
    WORKER = "diskferry.export.worker"
    READS = ("volumes",)
    kind: Literal["export"] = "export"
    name: str
    volumes: list[ExportVolumeSpec] = Field(min_length=1)
    token_file: str = Field(alias="tokenFile")
    ttl: float = Field(default=7200.0, ge=0)
    grace: float = Field(default=60.0, ge=0)
    manifest: str | None = Field(
        default=None,
        description="the VM's manifest (a YAML file of documents), served as `all`; a relative "
        "spec.dataSource.http.url in it (volumes/<vol>/disk.img.gz) is pointed at the side asked",
    )
    links: LinkSettings | None = None
    unix_socket: str | None = Field(
        default=None,
        alias="unixSocket",
        description="also serve plain HTTP on this Unix socket (owner-only), for a proxy on "
        "this host; the token is checked there too",
    )

    @model_validator(mode="after")
    def _distinct_volumes(self) -> ExportJob:
        if len({v.name for v in self.volumes}) != len(self.volumes):
            raise PydanticCustomError("volume_names", "two volumes have the same name")
        return self


def default_proxy_processes() -> int:
    """One proxy process per usable CPU, at most MAX_DEFAULT_PROXY_PROCESSES: each relays
    its streams through TLS on one core."""
    return min(usable_cpus(), MAX_DEFAULT_PROXY_PROCESSES)


class ProxyJob(WorkerJob, Listening):
    """What `diskferry proxy serve` and the worker run: the export proxy over a routes file, or
    over each export's headless Service in a cluster (`servicesCa`, the CA file that verifies
    the servers), in `processes` processes that accept on one port and share the backend
    pool's bounds."""

    WORKER = "diskferry.export.worker"
    kind: Literal["proxy"] = "proxy"
    routes: str | None = Field(
        default=None, description="the routes file (YAML), re-read when it changes"
    )
    services_ca: str | None = Field(
        default=None,
        alias="servicesCa",
        description="route each export to its server's headless Service instead, verified "
        "against this CA file (re-read when it changes)",
    )
    cluster_api: ClusterApi | None = Field(
        default=None,
        alias="clusterApi",
        description="with servicesCa: the cluster's API, asked whether an export whose "
        "Service's name resolves to nothing has a Service (503, its server has no address "
        "yet) or none (404)",
    )
    backend_idle_timeout: float = Field(default=30.0, gt=0, alias="backendIdleTimeout")
    grace: float = Field(default=10.0, ge=0)
    processes: int = Field(default_factory=default_proxy_processes, ge=1, le=64)

    @model_validator(mode="after")
    def _one_way_to_route(self) -> ProxyJob:
        if (self.routes is None) == (self.services_ca is None):
            raise PydanticCustomError("proxy_routes", "give routes or servicesCa, one of them")
        if self.cluster_api is not None and self.services_ca is None:
            raise PydanticCustomError("proxy_api", "clusterApi is asked only with servicesCa")
        return self


class ServeResult(BaseModel):
    """How a server ended: `expired` (its TTL) or `stopped` (SIGTERM, SIGINT, or cancelled)."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    ended: Literal["expired", "stopped"]
    listen_port: int = Field(alias="listenPort")
    transfers_cut: bool = Field(alias="transfersCut")

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)
