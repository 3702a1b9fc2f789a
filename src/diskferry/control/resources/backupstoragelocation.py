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

from diskferry.control.kinds import AGE, Column, KindInfo
from diskferry.control.model import (
    API_VERSION,
    GROUP,
    NAME_PATTERN,
    VERSION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.common import ApiVersion, Base64, Duration, invalid


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

    bucket: str = Field(min_length=1)
    prefix: str | None = None
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


class LocationConfig(ApiModel):
    """The provider's settings, as Velero's AWS plugin names them, and `encryption`."""

    region: str | None = None
    s3_url: str | None = Field(default=None, alias="s3Url", pattern=r"^https?://\S+$")
    s3_force_path_style: str | None = Field(default=None, alias="s3ForcePathStyle")
    profile: str | None = None
    encryption: Literal["none"] | None = Field(
        default=None,
        description="`none`: the repository is made and opened unencrypted, and the location "
        "says so (condition Encrypted False, a Warning Event). Unset (the default): the "
        "repository is encrypted with the password `spec.encryptionSecretRef` names, and a "
        "location without that reference is Unavailable.",
    )


class SecretKeyRef(ApiModel):
    """A key of a Secret in the location's namespace."""

    name: str = Field(pattern=NAME_PATTERN)
    key: str = Field(min_length=1)


class BackupStorageLocationSpec(ApiModel):
    """Where the repository is, how to reach it, and its password."""

    provider: Literal["filesystem", "aws"]
    object_storage: ObjectStorageLocation = Field(alias="objectStorage")
    config: LocationConfig = Field(default_factory=LocationConfig)
    credential: SecretKeySelector | None = Field(
        default=None,
        description="For `aws`: the Secret key holding an AWS credentials file whose [default] "
        "profile has the keys. Unset: the daemon's AWS_* environment.",
    )
    default: bool = False
    encryption_secret_ref: SecretKeyRef | None = Field(
        default=None,
        alias="encryptionSecretRef",
        description="The Secret key holding the repository's password (diskferry's; Velero "
        "keeps one static key). Required unless `config.encryption` is `none`.",
    )
    validation_frequency: Duration | None = Field(default=None, alias="validationFrequency")
    access_mode: Literal["ReadWrite", "ReadOnly"] = Field(default="ReadWrite", alias="accessMode")

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

    phase: BSLPhase | None = None
    last_validation_time: datetime | None = Field(default=None, alias="lastValidationTime")
    message: str | None = None
    repository_id: str | None = Field(default=None, alias="repositoryID")


class BackupStorageLocation(Resource):
    """A backup repository's location."""

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
