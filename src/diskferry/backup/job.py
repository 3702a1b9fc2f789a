"""The backup and restore jobs and their results, shared by the CLI and the worker."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from diskferry.backup.errors import PasswordError
from diskferry.backup.password import read_password
from diskferry.disk.jobrunner import WorkerJob

if TYPE_CHECKING:
    from diskferry.backup.repository import Repository
    from diskferry.objstore.store import S3Options


class RepoAccess(WorkerJob):
    """Where the repository is and where its password comes from (never the password itself)."""

    repo: str
    password_file: str | None = Field(default=None, alias="passwordFile")
    password_env: str | None = Field(
        default=None, alias="passwordEnv", description="an environment variable holding it"
    )
    s3_endpoint: str | None = Field(default=None, alias="s3Endpoint")
    s3_region: str | None = Field(default=None, alias="s3Region")
    wait: bool = Field(default=False, description="wait for conflicting locks instead of refusing")

    def password(self) -> str | None:
        """The password from the file, the named variable, or $DISKFERRY_PASSWORD."""
        if self.password_env and not self.password_file:
            value = os.environ.get(self.password_env)
            if not value:
                raise PasswordError(f"the environment variable {self.password_env} is not set")
            return value
        return read_password(self.password_file)

    def s3_options(self) -> S3Options:
        """The S3 settings given, over those of the environment."""
        from diskferry.objstore.store import S3Options

        return S3Options(endpoint=self.s3_endpoint, region=self.s3_region)

    def open_repository(self) -> Repository:
        """Open the repository with the job's password and S3 settings."""
        from diskferry.backup.repository import Repository

        return Repository.open(self.repo, self.password(), s3=self.s3_options())

    @property
    def lock_wait(self) -> float:
        """Seconds to wait for a conflicting lock."""
        return float("inf") if self.wait else 0.0


class DiskSource(BaseModel):
    """A disk to back up: its name in the repository, and a raw volume, overlay or NBD URL."""

    name: str
    path: str


class BackupJob(RepoAccess):
    """What `diskferry backup` and the worker run: the disks of one VM into a repository."""

    kind: Literal["backup"] = "backup"
    vm: str
    disks: list[DiskSource] = Field(min_length=1)
    qmp: str | None = None
    nbd_socket: str | None = Field(
        default=None, alias="nbdSocket", description="the NBD server the VM's QEMU already runs"
    )
    qga: str | None = None
    full: bool = False
    max_incrementals: int | None = Field(default=None, ge=0, alias="maxIncrementals")
    tags: list[str] = Field(default_factory=list)


class RestoreJob(RepoAccess):
    """What `diskferry restore` and the worker run: one disk snapshot into a target."""

    kind: Literal["restore"] = "restore"
    snapshot: str
    target: str
    vm: str | None = None
    disk: str | None = None
    format: Literal["raw", "qcow2"] = "raw"
    size: int | None = Field(default=None, ge=0)
    force: bool = False


class _Result(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)


class DiskResult(_Result):
    """What a backup did for one disk."""

    disk: str
    snapshot: str
    type: Literal["full", "incremental"]
    reason: str
    cbt: bool
    bytes_read: int = Field(alias="bytesRead")
    bytes_new: int = Field(alias="bytesNew")
    bytes_uploaded: int = Field(alias="bytesUploaded")
    seconds: float


class BackupResult(_Result):
    """What a backup did: its id, its consistency, and each disk."""

    backup: str
    vm: str
    consistency: str
    disks: list[DiskResult]


class RestoreResult(_Result):
    """What a restore did."""

    snapshot: str
    target: str
    format: str
    size: int
    bytes_written: int = Field(alias="bytesWritten")
    chunks_read: int = Field(alias="chunksRead")
    chain_reset: bool = Field(alias="chainReset")
    seconds: float
