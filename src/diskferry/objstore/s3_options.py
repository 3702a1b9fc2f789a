"""The settings of an S3 store, apart from its client so that naming them loads no client."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class S3Options:
    """Explicit S3 settings; any left None comes from the usual AWS_* environment variables."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
