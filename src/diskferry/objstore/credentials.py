"""AWS-style shared credentials files (`[profile]` with `aws_access_key_id` and
`aws_secret_access_key`), as Velero's BackupStorageLocation credentials hold them."""

from __future__ import annotations

import configparser

from diskferry.objstore.errors import ObjectStoreError

DEFAULT_PROFILE = "default"


def parse_credentials(text: str, profile: str = DEFAULT_PROFILE) -> tuple[str, str]:
    """The access key id and secret key of `profile` in a credentials file's text."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        raise ObjectStoreError(
            "the credentials are not an AWS credentials file ([default] with "
            "aws_access_key_id and aws_secret_access_key)",
            reason="BadCredentials",
        ) from None
    if not parser.has_section(profile):
        raise ObjectStoreError(
            f"the credentials file has no [{profile}] profile", reason="BadCredentials"
        )
    section = parser[profile]
    key, secret = section.get("aws_access_key_id"), section.get("aws_secret_access_key")
    if not key or not secret:
        raise ObjectStoreError(
            f"the [{profile}] profile of the credentials file needs aws_access_key_id and "
            "aws_secret_access_key",
            reason="BadCredentials",
        )
    return key.strip(), secret.strip()


def read_credentials(path: str, profile: str = DEFAULT_PROFILE) -> tuple[str, str]:
    """The access key id and secret key of `profile` in the credentials file at `path`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ObjectStoreError(
            f"cannot read the credentials file {path}: {e.strerror}", reason="BadCredentials"
        ) from e
    return parse_credentials(text, profile)
