"""BackupStorageLocation (`bsl`): where a backup repository lives, in Velero's shape.

`spec.provider` is `filesystem` (the bucket is an absolute directory) or `aws` (an S3 bucket,
`spec.config.s3Url` for another endpoint than AWS's, `spec.credential` a Secret holding an AWS
credentials file); `spec.encryptionSecretRef` names the Secret key holding the repository's
password, and a location without one is Unavailable unless `spec.config.encryption: none` asks
for an unencrypted repository. Status: `phase` Available or Unavailable, `lastValidationTime`,
`message`, the condition `Encrypted`.
"""

from __future__ import annotations

import os
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator

from diskferry.control.resources.common import ApiVersion, Base64, Duration, invalid
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
from diskferry.control.resources.noeffect import no_effect


class BSLPhase(StrEnum):
    """Whether the location's repository can be used."""

    AVAILABLE = "Available"
    UNAVAILABLE = "Unavailable"


class SecretKeySelector(ApiModel):
    """A key of a Secret in the location's namespace, as Kubernetes' SecretKeySelector."""

    name: str = Field(
        default="",
        pattern=rf"^$|{NAME_PATTERN}",
        description="The Secret's name (default empty: no Secret, which only `optional` allows).",
    )
    key: str = Field(min_length=1, description="The key in the Secret.")
    optional: bool | None = Field(
        default=None,
        description="true: a missing Secret or key is no error, and the location goes on "
        "without it. Default false.",
    )


class ObjectStorageLocation(ApiModel):
    """The bucket (for `filesystem`, an absolute directory), a prefix inside it, and the CA
    that signed an S3 endpoint's certificate."""

    bucket: str = Field(
        min_length=1,
        description="For `aws`, the S3 bucket; for `filesystem`, an absolute directory.",
    )
    prefix: str | None = Field(default=None, description="The repository's path in the bucket.")
    ca_cert: Base64 | None = Field(
        default=None,
        alias="caCert",
        description="PEM certificates of the CA that signed the S3 endpoint's TLS certificate, "
        "in base64, trusted besides the system's (deprecated by Velero for caCertRef). "
        "Not with caCertRef.",
    )
    ca_cert_ref: SecretKeySelector | None = Field(
        default=None,
        alias="caCertRef",
        description="The Secret key holding PEM certificates of the CA that signed the S3 "
        "endpoint's TLS certificate, trusted besides the system's. Not with caCert.",
    )

    @model_validator(mode="after")
    def _one_ca(self) -> ObjectStorageLocation:
        if self.ca_cert is not None and self.ca_cert_ref is not None:
            raise invalid("caCert and caCertRef cannot both be set: keep caCertRef")
        return self


UNENCRYPTED = "none"
"""`spec.config.encryption` of a location whose repository is kept unencrypted."""
ENCRYPTED = "Encrypted"


class LocationConfig(ApiModel):
    """The provider's settings, as Velero's AWS plugin names them, and `encryption`."""

    region: str | None = Field(default=None, description="The S3 region (default us-east-1).")
    s3_url: str | None = Field(
        default=None,
        alias="s3Url",
        pattern=r"^https?://\S+$",
        description="The S3 endpoint, for a server other than AWS's.",
    )
    s3_force_path_style: str | None = no_effect(
        "requests always name the bucket in the path",
        "Whether requests name the bucket in the path rather than the host.",
        default=None,
        alias="s3ForcePathStyle",
    )
    profile: str | None = Field(
        default=None,
        description="The profile of the credentials file whose keys are used (default `default`).",
    )
    encryption: Literal["none"] | None = Field(
        default=None,
        description="`none`: the repository is made and opened unencrypted, and the location "
        "says so (condition Encrypted False, a Warning Event). Unset (the default): the "
        "repository is encrypted with the password `spec.encryptionSecretRef` names, and a "
        "location without that reference is Unavailable.",
    )


class SecretKeyRef(ApiModel):
    """A key of a Secret in the location's namespace."""

    name: str = Field(pattern=NAME_PATTERN, description="The Secret's name.")
    key: str = Field(min_length=1, description="The key in the Secret.")


class BackupStorageLocationSpec(ApiModel):
    """Where the repository is, how to reach it, and its password."""

    provider: Literal["filesystem", "aws"] = Field(
        description="`aws`: an S3 bucket (AWS's or any S3 server's); `filesystem`: a directory "
        "of this host. Velero's other object-store plugins have no counterpart here."
    )
    object_storage: ObjectStorageLocation = Field(
        alias="objectStorage", description="The bucket and the path in it."
    )
    config: LocationConfig = Field(
        default_factory=LocationConfig,
        description="The provider's settings, as Velero's AWS plugin names them; other keys "
        "are refused.",
    )
    credential: SecretKeySelector | None = Field(
        default=None,
        description="For `aws`: the Secret key holding an AWS credentials file whose [default] "
        "profile has the keys. Unset: the daemon's AWS_* environment.",
    )
    default: bool = Field(
        default=False,
        description="true: the location of the namespace's Backups that name none.",
    )
    backup_sync_period: Duration | None = Field(
        default=None,
        alias="backupSyncPeriod",
        description="How often the Backups whose metadata the repository holds, made by any "
        "host, are made here where they are missing (Velero's backup sync). Unset: 1m; 0: "
        "never.",
    )
    encryption_secret_ref: SecretKeyRef | None = Field(
        default=None,
        alias="encryptionSecretRef",
        description="The Secret key holding the repository's password (diskferry's; Velero "
        "keeps one static key). Required unless `config.encryption` is `none`.",
    )
    validation_frequency: Duration | None = Field(
        default=None,
        alias="validationFrequency",
        description="How often the repository is opened to check the location. Unset: 1m; 0: "
        "only when the spec changes.",
    )
    access_mode: Literal["ReadWrite", "ReadOnly"] = Field(
        default="ReadWrite",
        alias="accessMode",
        description="ReadWrite (the default), or ReadOnly: restores only, no Backup nor "
        "DataUpload writes, and a missing repository is not made.",
    )

    @model_validator(mode="after")
    def _bucket_fits_provider(self) -> BackupStorageLocationSpec:
        bucket = self.object_storage.bucket
        if self.provider == "filesystem" and not os.path.isabs(bucket):
            raise invalid(f"objectStorage.bucket: {bucket!r} is not an absolute directory")
        if self.provider == "aws" and "/" in bucket:
            raise invalid(f"objectStorage.bucket: {bucket!r} is not a bucket name")
        if self.config.encryption == UNENCRYPTED and self.encryption_secret_ref is not None:
            raise invalid(
                "config.encryption: none and encryptionSecretRef cannot both be set: "
                "remove one (a repository is encrypted with a password, or not at all)"
            )
        return self


class BackupStorageLocationStatus(Status):
    """Whether the repository could be opened when last looked at, and why not."""

    phase: BSLPhase | None = Field(
        default=None,
        description="Available (the repository opened, or was made, when last checked) or "
        "Unavailable (it could not be opened: message says why).",
    )
    last_validation_time: datetime | None = Field(
        default=None, alias="lastValidationTime", description="When it was last checked."
    )
    message: str | None = Field(
        default=None,
        description="Why it is Unavailable, or which repository opened (or was made) and where.",
    )
    repository_id: str | None = Field(
        default=None, alias="repositoryID", description="The repository's id."
    )
    access_mode: Literal["ReadWrite", "ReadOnly"] | None = no_effect(
        "never set: spec.accessMode is what counts, as in Velero, where this field is unused",
        "The access mode.",
        default=None,
        alias="accessMode",
    )
    last_synced_time: datetime | None = Field(
        default=None,
        alias="lastSyncedTime",
        description="When the Backups in the repository were last synced here.",
    )
    last_synced_revision: str | None = Field(
        default=None,
        alias="lastSyncedRevision",
        description="The repository's metadata revision at the last sync: a digest of the "
        "Backups' metadata names it holds.",
    )


class BackupStorageLocation(Resource):
    """A backup repository's location.

    Velero's shape. The daemon opens the repository at each validation and creates it at first use
    when absent. A location without encryptionSecretRef is Unavailable (EncryptionNotConfigured)
    unless spec.config.encryption: none asks for an unencrypted repository, which the condition
    Encrypted (False) and a Warning Event then say. Every backupSyncPeriod an Available location
    makes the Backups of its namespace whose metadata its repository holds and this daemon lacks
    (annotated diskferry.io/synced-from, their status taken from the metadata), and deletes those
    it synced whose metadata went, as Velero's backup sync does.
    """

    CONDITIONS = {
        ENCRYPTED: "True (PasswordSet) when the repository is encrypted with the password of "
        "encryptionSecretRef; False (EncryptionDisabled) when spec.config.encryption: none "
        "keeps it unencrypted. Written at each validation that opens the repository.",
        **RECONCILED_CONDITION,
    }

    api_version: ApiVersion = API_VERSION
    kind: Literal["BackupStorageLocation"] = "BackupStorageLocation"
    spec: BackupStorageLocationSpec
    status: BackupStorageLocationStatus = Field(default_factory=BackupStorageLocationStatus)


BACKUP_STORAGE_LOCATIONS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="BackupStorageLocation",
    plural="backupstoragelocations",
    model=BackupStorageLocation,
    short_names=("bsl",),
    categories=("diskferry",),
    columns=(
        Column("Phase", ".status.phase", description="Backup storage location status"),
        Column("Last Validated", ".status.lastValidationTime", "date"),
        AGE,
        Column("Default", ".spec.default", "boolean"),
    ),
)
