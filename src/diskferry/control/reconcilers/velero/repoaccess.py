"""A BackupStorageLocation made usable: its repository's URL, S3 settings and password, as the
files and fields of a backup worker's job (the daemon never opens a repository itself)."""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from diskferry.base.errors import DiskferryError
from diskferry.control.resources.backupstoragelocation import (
    UNENCRYPTED,
    BackupStorageLocation,
    SecretKeyRef,
    SecretKeySelector,
)
from diskferry.control.resources.core import Secret
from diskferry.control.resources.model import Reason
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.runner.base import JobFile

PASSWORD_FILE = "repo-password"
ENCRYPTION_NOT_CONFIGURED = Reason("EncryptionNotConfigured")
CREDENTIALS_FILE = "s3-credentials"
CA_FILE = "s3-ca.pem"

if TYPE_CHECKING:
    from diskferry.backup import RepoAccess

J = TypeVar("J", bound="RepoAccess")


class LocationError(DiskferryError):
    """A storage location cannot be used: a Secret or a key of it is missing."""

    reason = "LocationUnusable"


def secret_value(client: Client, namespace: str | None, ref: SecretKeyRef, what: str) -> bytes:
    """The value of `ref` in `namespace`, or LocationError saying which is missing."""
    if not ref.name:
        raise LocationError(f"the reference to the {what} names no Secret")
    secret = client.get(Secret, namespace, ref.name)
    if secret is None:
        raise LocationError(f"the Secret {ref.name} with the {what} does not exist")
    value = secret.value(ref.key)
    if value is None:
        raise LocationError(f"the Secret {ref.name} has no key {ref.key} (the {what})")
    return value


def selected_value(
    client: Client, namespace: str | None, ref: SecretKeySelector | None, what: str
) -> bytes | None:
    """The value of `ref` in `namespace`: None when there is no `ref`, or when it is optional
    and missing; LocationError when it is required and missing."""
    if ref is None:
        return None
    try:
        return secret_value(client, namespace, ref, what)
    except LocationError:
        if ref.optional:
            return None
        raise


@dataclass(frozen=True)
class Location:
    """Where a repository is, and what opens it."""

    url: str
    password: str | None
    endpoint: str | None = None
    region: str | None = None
    credentials: bytes | None = None
    ca_bundle: bytes | None = None
    profile: str | None = None

    def job(self, model: type[J], **fields: Any) -> tuple[J, list[JobFile]]:
        """A `model` job on this repository with `fields` besides, and the files its repository
        fields name (the password, the S3 credentials and CA)."""
        access: dict[str, Any] = {"repo": self.url}
        files: list[JobFile] = []
        if self.password is not None:
            access["password_file"] = PASSWORD_FILE
            files.append(JobFile(PASSWORD_FILE, self.password.encode(), credential=True))
        if self.endpoint:
            access["s3_endpoint"] = self.endpoint
        if self.region:
            access["s3_region"] = self.region
        if self.credentials is not None:
            access["s3_credentials_file"] = CREDENTIALS_FILE
            access["s3_profile"] = self.profile
            files.append(JobFile(CREDENTIALS_FILE, self.credentials, credential=True))
        if self.ca_bundle is not None:
            access["s3_ca_file"] = CA_FILE
            files.append(JobFile(CA_FILE, self.ca_bundle))
        return model(**access, **fields), files


def location_of(client: Client, bsl: BackupStorageLocation) -> Location:
    """The repository of `bsl`, its Secrets read; LocationError when it names no password and
    does not ask for an unencrypted repository."""
    spec, namespace = bsl.spec, bsl.metadata.namespace
    prefix = (spec.object_storage.prefix or "").strip("/")
    password = None
    if spec.encryption_secret_ref is not None:
        raw = secret_value(client, namespace, spec.encryption_secret_ref, "repository password")
        password = raw.decode(errors="replace").rstrip("\n")
    elif spec.config.encryption != UNENCRYPTED:
        raise LocationError(
            "no spec.encryptionSecretRef: name the Secret key holding the repository's password, "
            "or set spec.config.encryption: none for a repository kept unencrypted",
            reason=ENCRYPTION_NOT_CONFIGURED,
        )
    if spec.provider == "filesystem":
        return Location(os.path.join(spec.object_storage.bucket, prefix), password)
    storage = spec.object_storage
    credentials = selected_value(client, namespace, spec.credential, "S3 credentials")
    ca_bundle = selected_value(
        client, namespace, storage.ca_cert_ref, "S3 endpoint's CA certificate"
    )
    if storage.ca_cert is not None:
        ca_bundle = base64.b64decode(storage.ca_cert)
    url = f"s3://{storage.bucket}/{prefix}".rstrip("/")
    return Location(
        url,
        password,
        spec.config.s3_url,
        spec.config.region,
        credentials,
        ca_bundle,
        spec.config.profile,
    )
