"""The import job, its phases and its result, shared by the CLI and the worker."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from diskferry.worker.job import WorkerJob, refuse_inline_secret

if TYPE_CHECKING:
    from diskferry.registry.client import RegistryOptions


class ImportPhase(StrEnum):
    """What an import is doing."""

    OPENING = "Opening"
    IMPORTING = "Importing"
    CONVERTING = "Converting"


class ImportJob(WorkerJob):
    """Where from, where to, and how: what `diskferry import` and the worker run.

    `headers` may carry secrets, so a job file gives them only through `headersFile`;
    the CLI passes the `--header` values it was given in-process.
    """

    WORKER = "diskferry.importer.worker"
    READS = ("source",)
    kind: Literal["import"] = "import"
    source: str
    target: str
    format: Literal["raw", "qcow2"] = "raw"
    size: int | None = Field(default=None, ge=0)
    checksum: str | None = None
    ca_bundle: str | None = Field(default=None, alias="caBundle")
    headers: dict[str, str] = Field(default_factory=dict)
    headers_file: str | None = Field(
        default=None, alias="headersFile", description="'Name: value' lines, for secret headers"
    )
    retries: int = Field(default=5, ge=0)
    timeout: float = Field(default=30.0, gt=0, description="seconds to wait for an answer")
    insecure: bool = Field(default=False, description="plain HTTP, for a registry on loopback")
    authfile: str | None = Field(default=None, description="a Docker config with `auths`")
    creds: str | None = Field(default=None, description="USER:PASS for the registry")
    force: bool = Field(default=False, description="replace a target that exists")
    content_check: bool = Field(
        default=True,
        alias="contentCheck",
        description="refuse an HTML page, and a raw image whose size is not a multiple of 512",
    )

    @field_validator("creds")
    @classmethod
    def _creds_from_a_file(cls, value: str | None, info: ValidationInfo) -> str | None:
        refuse_inline_secret(info, bool(value), "authfile")
        return value

    @field_validator("headers")
    @classmethod
    def _headers_from_a_file(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        refuse_inline_secret(info, bool(value), "headersFile")
        return value


class ImportResult(BaseModel):
    """What an import did."""

    model_config = ConfigDict(populate_by_name=True)

    target: str
    source_format: str = Field(alias="sourceFormat")
    compression: str | None
    format: str
    virtual_size: int = Field(alias="virtualSize")
    bytes_read: int = Field(alias="bytesRead")
    bytes_written: int = Field(alias="bytesWritten")
    seconds: float
    average_speed: float = Field(alias="averageSpeed")
    checksum: str | None
    resumes: int = 0
    digest: str | None = Field(default=None, description="the image's manifest digest")

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)


def registry_options(job: ImportJob) -> RegistryOptions:
    """How the job reaches a registry, for a docker:// source."""
    from diskferry.registry.auth import parse_creds
    from diskferry.registry.client import RegistryOptions

    return RegistryOptions(
        credentials=parse_creds(job.creds) if job.creds else None,
        authfile=job.authfile,
        ca_bundle=job.ca_bundle,
        insecure=job.insecure,
        retries=job.retries,
        timeout=job.timeout,
    )
