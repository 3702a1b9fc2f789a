"""The settings of an S3 store, apart from its client so that naming them loads no client."""

from __future__ import annotations

from dataclasses import dataclass

from diskferry.objstore.errors import ObjectStoreError


@dataclass(frozen=True, slots=True)
class S3Options:
    """Explicit S3 settings; any left None comes from the usual AWS_* environment variables.
    `ca_bundle` holds PEM certificates trusted for the endpoint besides the system's."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    ca_bundle: bytes | None = None


def read_ca_bundle(path: str) -> bytes:
    """The PEM certificates in the file at `path`, for `S3Options.ca_bundle`."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ObjectStoreError(
            f"cannot read the CA bundle {path}: {e.strerror}", reason="BadCaBundle"
        ) from e
