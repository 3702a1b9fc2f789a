"""The backup engine's jobs and their results, shared by the CLI and the worker: backup,
restore, the repository operations (init, check, forget, prune, chain reset, CBT, upgrade), a
control plane's repository chores, and hooks run in a guest."""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from diskferry.backup.errors import PasswordError, PointTokenError
from diskferry.backup.password import read_password
from diskferry.backup.policy import KeepPolicy
from diskferry.worker.job import JobModel, WorkerJob

if TYPE_CHECKING:
    from diskferry.backup.repository import Repository
    from diskferry.objstore.store import S3Options


MIN_CHUNK_SIZE = 4096
HOOK_FAILED = "HookFailed"
_FAILED_HOOK = re.compile(r"^hook (?P<name>\S+) \((?P<phase>pre|post)\) failed: ")


class RepoAccess(WorkerJob):
    """Where the repository is and where its password comes from (never the password itself:
    a job file names a file or an environment variable, and has no field for it inline)."""

    WORKER = "diskferry.backup.worker"
    repo: str
    password_file: str | None = Field(default=None, alias="passwordFile")
    password_env: str | None = Field(
        default=None, alias="passwordEnv", description="an environment variable holding it"
    )
    s3_endpoint: str | None = Field(default=None, alias="s3Endpoint")
    s3_region: str | None = Field(default=None, alias="s3Region")
    s3_credentials_file: str | None = Field(
        default=None,
        alias="s3CredentialsFile",
        description="an AWS credentials file whose [default] profile holds the keys",
    )
    s3_profile: str | None = Field(
        default=None,
        alias="s3Profile",
        description="the profile of s3CredentialsFile that holds the keys (default `default`)",
    )
    s3_ca_file: str | None = Field(
        default=None,
        alias="s3CaFile",
        description="a PEM file of the CA certificates that sign the S3 endpoint's, "
        "trusted besides the system's",
    )
    wait: bool = Field(default=False, description="wait for conflicting locks instead of refusing")
    _opening: Future[Repository] | None = PrivateAttr(default=None)

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

        key = secret = None
        if self.s3_credentials_file:
            from diskferry.objstore.credentials import read_credentials

            key, secret = read_credentials(self.s3_credentials_file, self.s3_profile or "default")
        ca_bundle = None
        if self.s3_ca_file:
            from diskferry.objstore.s3_options import read_ca_bundle

            ca_bundle = read_ca_bundle(self.s3_ca_file)
        return S3Options(
            endpoint=self.s3_endpoint,
            region=self.s3_region,
            access_key_id=key,
            secret_access_key=secret,
            ca_bundle=ca_bundle,
        )

    def start_opening(self) -> None:
        """Begin opening the repository in a thread of its own, for open_repository to take:
        the key derivation (scrypt, a fifth of a second, out of the GIL) then goes on while
        the caller imports and prepares what it runs next."""
        opening: Future[Repository] = Future()

        def run() -> None:
            try:
                opening.set_result(self._open())
            except BaseException as e:  # handed to open_repository, which raises it
                opening.set_exception(e)

        self._opening = opening
        threading.Thread(target=run, name="repository-open", daemon=True).start()

    def open_repository(self) -> Repository:
        """Open the repository with the job's password and S3 settings (the opening that
        start_opening began, once)."""
        opening, self._opening = self._opening, None
        return opening.result() if opening is not None else self._open()

    def _open(self) -> Repository:
        from diskferry.backup.repository import Repository

        return Repository.open(self.repo, self.password(), s3=self.s3_options())

    @property
    def lock_wait(self) -> float:
        """Seconds to wait for a conflicting lock."""
        return float("inf") if self.wait else 0.0


class DiskSource(JobModel):
    """A disk to back up: its name in the repository, and a raw volume, overlay or NBD URL."""

    name: str
    path: str


class DiskTransfer(RepoAccess):
    """A job that moves a disk's bytes (a backup reading them, a restore writing them), at most
    `bandwidthLimit` bytes a second when given."""

    bandwidth_limit: int | None = Field(
        default=None, ge=1, alias="bandwidthLimit", description="bytes a second; unset: unlimited"
    )


class HookCommand(JobModel):
    """A command run in the VM's guest through its guest agent, before (`pre`) the backup
    point is taken or after (`post`) it was."""

    name: str = Field(min_length=1, description="the hook's name, for events and results")
    phase: Literal["pre", "post"]
    command: list[str] = Field(min_length=1, description="a program's path in the guest, its args")
    on_error: Literal["Continue", "Fail"] = Field(
        default="Fail", alias="onError", description="Fail: a failure fails the backup"
    )
    timeout: float = Field(default=30.0, gt=0, description="seconds it may run")


class PointDisk(JobModel):
    """A disk of a backup point: its name in the repository, its endpoints, and the checkpoint
    its map shows the changes since (None: the disk is served full, its map showing what reads
    as zeros)."""

    name: str
    data: str = Field(description="the URL of the disk's bytes at the point (?offset=&length=)")
    map: str = Field(description="the URL of the disk's extent map (?offset=&length=&page_size=)")
    since: str | None = Field(
        default=None, description="the checkpoint the disk's map shows the changes since"
    )


class BackupPoint(JobModel):
    """A backup point a server serves, as KubeVirt serves a Pull VirtualMachineBackup's (and
    diskferry's backup-point worker its points): each disk's data and map endpoints behind a
    token, over TLS from a CA; and the checkpoint the point made."""

    disks: list[PointDisk] = Field(min_length=1)
    token_file: str = Field(alias="tokenFile", description="a file holding the point's token")
    ca_file: str | None = Field(
        default=None, alias="caFile", description="the CA (PEM) of the server's certificate"
    )
    checkpoint: str | None = Field(default=None, description="the checkpoint the point made")
    consistency: str = Field(
        default="crash-consistent", description="what the point's server says it froze"
    )

    def token(self) -> str:
        """The token, read from its file."""
        try:
            token = Path(self.token_file).read_text().strip()
        except OSError as e:
            raise PointTokenError(
                f"cannot read the point's token file {self.token_file}: {e.strerror}"
            ) from e
        if not token:
            raise PointTokenError(f"the point's token file {self.token_file} is empty")
        return token


class BackupJob(DiskTransfer):
    """What `diskferry backup` and the worker run: the disks of one VM into a repository, read
    from their volumes (`disks`) or from a backup point a server serves (`point`)."""

    kind: Literal["backup"] = "backup"
    vm: str
    disks: list[DiskSource] = Field(default_factory=list)
    point: BackupPoint | None = None
    qmp: str | None = None
    nbd_socket: str | None = Field(
        default=None, alias="nbdSocket", description="the NBD server the VM's QEMU already runs"
    )
    qga: str | None = None
    hooks: list[HookCommand] = Field(default_factory=list)
    hook_agent: str | None = Field(
        default=None,
        alias="hookAgent",
        description="the guest agent that runs the hooks; without one no hook runs",
    )
    full: bool = False
    max_incrementals: int | None = Field(default=None, ge=0, alias="maxIncrementals")
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_source(self) -> BackupJob:
        if bool(self.disks) == (self.point is not None):
            raise PydanticCustomError(
                "disks", "name the disks' volumes, or a backup point, and not both"
            )
        return self


class RestoreJob(DiskTransfer):
    """What `diskferry restore` and the worker run: one disk snapshot into a target."""

    kind: Literal["restore"] = "restore"
    snapshot: str
    target: str
    vm: str | None = None
    disk: str | None = None
    format: Literal["raw", "qcow2"] = "raw"
    size: int | None = Field(default=None, ge=0)
    force: bool = False


class InitJob(RepoAccess):
    """What `diskferry repo init` and the worker run: a new, empty repository."""

    kind: Literal["init"] = "init"
    chunk_size: int = Field(default=1 << 20, alias="chunkSize")
    max_incrementals: int = Field(default=0, ge=0, alias="maxIncrementals")
    encrypted: bool = True

    @field_validator("chunk_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value < MIN_CHUNK_SIZE or value & (value - 1):
            raise PydanticCustomError(
                "chunk_size", "the chunk size must be a power of two, 4K or more"
            )
        return value


class CheckJob(RepoAccess):
    """What `diskferry repo check` and the worker run: the repository checked, its data too."""

    kind: Literal["check"] = "check"
    read_data: bool = Field(default=False, alias="readData")


class ForgetJob(RepoAccess, KeepPolicy):
    """What `diskferry forget` and the worker run: snapshots dropped by id or by a keep policy."""

    kind: Literal["forget"] = "forget"
    snapshots: list[str] = Field(default_factory=list)
    vm: str | None = Field(default=None, description="apply the policy to this VM only")

    @model_validator(mode="after")
    def _something_to_forget(self) -> ForgetJob:
        if not self.snapshots and not self.has_policy:
            raise PydanticCustomError(
                "nothing_to_forget",
                "name snapshot ids, or a keep-last, keep-daily or keep-weekly policy",
            )
        return self


class PruneJob(RepoAccess):
    """What `diskferry prune` and the worker run: data no snapshot names deleted."""

    kind: Literal["prune"] = "prune"
    repack_all: bool = Field(
        default=False, alias="repackAll", description="repack every pack with an unused chunk"
    )


class ChainResetJob(RepoAccess):
    """What `diskferry chain reset` and the worker run: a VM's next backup made full."""

    kind: Literal["chainReset"] = "chainReset"
    vm: str
    disks: list[str] | None = Field(default=None, description="only these disks (default: all)")


class UpgradeJob(RepoAccess):
    """What `diskferry repo upgrade` runs: a format-2 repository brought to format 3."""

    kind: Literal["upgrade"] = "upgrade"
    insecure_no_encryption: bool = Field(
        default=False,
        alias="insecureNoEncryption",
        description="take a repository whose config says it is not encrypted, with no password",
    )


class MetadataListing(JobModel):
    """The names of the repository's metadata, and the documents of those that start with
    `prefix` and are not `known` (what a location's sync of its Backups reads)."""

    prefix: str
    known: list[str] = Field(default_factory=list)


class StoredMetadata(JobModel):
    """A metadata document to store as `name`, with the trackers of the VMs named in `trackers`
    (their names in the repository) put in it under `trackers`, as the repository holds them
    once the document is stored."""

    name: str
    document: dict[str, Any]
    trackers: list[str] = Field(default_factory=list)


class Forgetting(JobModel):
    """Snapshots forgotten, with the metadata that describes them."""

    snapshots: list[str] = Field(description="ids; those the repository has no more are skipped")
    keep: KeepPolicy | None = Field(
        default=None, description="forget only those of `snapshots` this policy lets go"
    )
    metadata: dict[str, list[str]] = Field(
        default_factory=dict,
        description="metadata names, each with the snapshots it describes: deleted once all of "
        "those were forgotten now, or whatever was forgotten when it names none",
    )


PruneWhen = Literal["never", "always", "ifForgotten"]
"""When chores prune: never, always, or only when snapshots went now."""


class Chores(JobModel):
    """A control plane's chores in a repository, run in this order on one opening of it."""

    sizes: list[str] = Field(
        default_factory=list, description="snapshot ids whose disks' sizes are read"
    )
    read: list[str] = Field(default_factory=list, description="metadata names to read")
    listing: MetadataListing | None = None
    store: StoredMetadata | None = None
    forget: Forgetting | None = None
    prune: PruneWhen = Field(default="never", description="when to prune, last")

    @property
    def reads(self) -> bool:
        """Whether the chores read metadata (asked for, or listed)."""
        return bool(self.read) or self.listing is not None


class ChoresJob(RepoAccess):
    """What the worker runs for a control plane: the repository opened (made when absent and
    `create`), then its chores, given in the job or, once known, in `choresFile`."""

    kind: Literal["chores"] = "chores"
    create: bool = Field(
        default=False,
        description="make the repository when there is none (encrypted when a password is given)",
    )
    chores: Chores | None = None
    output: str | None = Field(
        default=None,
        description="a file beside the job file that what the chores read (metadata and their "
        "names) is written to, as a MetadataRead (empty when they read none): a result line "
        "holds 4 KiB at most; chores that read need it",
    )
    chores_file: str | None = Field(
        default=None,
        alias="choresFile",
        description="a file beside the job file the chores come in: the worker opens the "
        "repository first, then waits for the file",
    )

    @model_validator(mode="after")
    def _chores_given_once(self) -> ChoresJob:
        if (self.chores is None) == (self.chores_file is None):
            raise PydanticCustomError("chores", "give the chores, or the file they come in")
        if self.chores is not None and self.chores.reads and self.output is None:
            raise PydanticCustomError("chores", "chores that read metadata need an output file")
        return self


class GuestHooksJob(WorkerJob):
    """Hooks run one after another in a VM's guest through its agent, none after one that
    failed with onError Fail (a Restore's exec hooks)."""

    WORKER = "diskferry.backup.worker"
    kind: Literal["hooks"] = "hooks"
    agent: str = Field(description="the guest agent's socket")
    hooks: list[HookCommand] = Field(min_length=1)


class CbtJob(WorkerJob):
    """What `diskferry cbt enable|disable` and the worker run, on one raw volume."""

    WORKER = "diskferry.backup.worker"
    kind: Literal["cbtEnable", "cbtDisable"]
    volume: str


class _Result(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    def to_json(self) -> dict:
        """The result as JSON-ready values, camelCase keys."""
        return self.model_dump(by_alias=True)


class CbtResult(_Result):
    """What a CBT job left: the raw volume, and its overlay while CBT is enabled."""

    volume: str
    overlay: str | None
    enabled: bool


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
    checkpoint: str | None = None


class HookOutcome(_Result):
    """How a hook's command ended."""

    name: str
    phase: Literal["pre", "post"]
    exit_code: int | None = Field(default=None, alias="exitCode")
    failed: bool
    message: str


class FailedHook(_Result):
    """The hook with onError Fail whose failure stopped a backup, as the backup's failure
    (reason HookFailed) names it."""

    name: str
    phase: Literal["pre", "post"]

    def says(self, why: str) -> str:
        """The failure's message: this hook, and why it failed."""
        return f"hook {self.name} ({self.phase}) failed: {why}"

    @classmethod
    def named_in(cls, reason: str, message: str) -> FailedHook | None:
        """The hook a failure with `reason` and `message` names, None when another stopped
        the backup."""
        found = _FAILED_HOOK.match(message) if reason == HOOK_FAILED else None
        return None if found is None else cls(name=found["name"], phase=found["phase"])


class BackupResult(_Result):
    """What a backup did: its id, its consistency, each disk, and each hook run."""

    backup: str
    vm: str
    consistency: str
    disks: list[DiskResult]
    hooks: list[HookOutcome] = Field(default_factory=list)


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


class InitResult(_Result):
    """The repository an init made."""

    repository: str
    url: str
    chunk_size: int = Field(alias="chunkSize")
    encrypted: bool
    max_incrementals: int = Field(alias="maxIncrementals")


class ForgetResult(_Result):
    """The snapshots a forget dropped, as VM/DISK/ID."""

    forgotten: list[str]


class PruneResult(_Result):
    """What a prune did."""

    packs_deleted: int = Field(alias="packsDeleted")
    packs_repacked: int = Field(alias="packsRepacked")
    packs_written: int = Field(alias="packsWritten")
    chunks_removed: int = Field(alias="chunksRemoved")
    bytes_freed: int = Field(alias="bytesFreed")
    unused_bytes: int = Field(alias="unusedBytes")
    packs_with_unused: int = Field(alias="packsWithUnused")


class ChainResetResult(_Result):
    """The disks of a VM whose chain was reset."""

    vm: str
    disks: list[str]


class UpgradeResult(_Result):
    """What an upgrade found and left."""

    repository: str
    url: str
    found_format: int = Field(alias="foundFormat")
    format: int
    encrypted: bool
    key_file: str | None = Field(alias="keyFile", description="the key file the password opened")


class MetadataRead(_Result):
    """What chores read of the repository's metadata, in the job's `output`."""

    documents: dict[str, dict[str, Any] | None] = Field(
        default_factory=dict, description="metadata read (listed or asked), None when absent"
    )
    names: list[str] | None = Field(default=None, description="the metadata names, if listed")


class ChoresResult(_Result):
    """What a repository's chores found and did (what they read is in the job's `output`)."""

    repository: str
    created: bool = Field(description="whether the repository was made now")
    encrypted: bool
    sizes: dict[str, int] = Field(default_factory=dict, description="disk size by snapshot id")
    read: bool = Field(default=False, description="whether a MetadataRead went to `output`")
    forgotten: list[str] = Field(default_factory=list, description="snapshot ids forgotten now")
    deleted_metadata: list[str] = Field(default_factory=list, alias="deletedMetadata")
    pruned: PruneResult | None = None


class HooksResult(_Result):
    """How each hook that ran ended, in order."""

    hooks: list[HookOutcome]
