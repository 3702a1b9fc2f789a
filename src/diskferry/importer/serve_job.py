"""The serve job and its result: a volume served read-only over NBD, the source of a clone that
a worker elsewhere reads (another node's, in a cluster), until it is stopped."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from diskferry.worker.job import WorkerJob


class ServePhase(StrEnum):
    """What a serve job is doing."""

    STARTING = "Starting"
    SERVING = "Serving"


class ServeJob(WorkerJob):
    """Serve `source` (a file or a block device) read-only over NBD at `listenAddress` (the
    Pod's own address in a Pod, when it is every address: see `worker.pod.server_address`) and
    `listenPort` (0: any free one), until stopped; with
    `tlsCertificates` (qemu's layout: ca-cert.pem, server-cert.pem, server-key.pem) TLS only,
    to clients whose certificate that CA signed. The address and port it listens on are in its
    /progress details once it does."""

    WORKER = "diskferry.importer.worker"
    READS = ("source",)
    EXPORT: ClassVar[str] = "disk"
    kind: Literal["serve"] = "serve"
    source: str
    export: str = Field(default=EXPORT, description="the NBD export's name")
    tls_certificates: str | None = Field(default=None, alias="tlsCertificates")
    listen_address: str = Field(default="127.0.0.1", alias="listenAddress")
    listen_port: int = Field(default=0, ge=0, le=65535, alias="listenPort")


class ServeResult(BaseModel):
    """Where a serve job listened until it was stopped."""

    model_config = ConfigDict(populate_by_name=True)

    listen_address: str = Field(alias="listenAddress")
    listen_port: int = Field(alias="listenPort")

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)
