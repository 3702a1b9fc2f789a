"""The stored `config`: its fields and a MAC of them under a key derived from the repository keys.

A writer of the storage can read and replace `config`, but without the keys it cannot make
the MAC of a config it changed. Format 3 stores `config` as one UTF-8 JSON object: the
fields of RepoConfig, and `mac`, the base64 (standard alphabet, padded) of

    HMAC-SHA256(K, C)
    K = HKDF-SHA256(key material M, no salt, info "diskferry config mac v1", 32 bytes)
    M = the data key then the chunk-id key, 64 bytes (the chunk-id key alone, 32 bytes,
        in an unencrypted repository)
    C = the object without `mac` in canonical JSON: members sorted by name at every depth,
        no whitespace, non-ASCII characters escaped as \\uXXXX, integers in decimal

C is made from the object as read, so every member counts, known or not; a member named
twice is refused. An unencrypted repository keeps its chunk-id key in the clear, so its MAC
only tells damage: what keeps it from passing for an encrypted one is that a password never
opens it, and that a client refuses it once it has seen it encrypted (repository.py).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from typing import Any, NamedTuple

from pydantic import ValidationError

from diskferry.backup.config import FORMAT_VERSION, UPGRADABLE_VERSION, RepoConfig
from diskferry.backup.crypto import mac
from diskferry.backup.errors import CorruptObjectError, RepositoryError, TamperingError
from diskferry.backup.keys import Keys

_PURPOSE = b"diskferry config mac v1"
_MAC = "mac"


class StoredConfig(NamedTuple):
    """A config as read: its fields, the bytes its MAC covers, and the MAC."""

    config: RepoConfig
    canonical: bytes
    mac: bytes


def encode_config(config: RepoConfig, keys: Keys) -> bytes:
    """The stored form of `config`, its MAC made with `keys`."""
    fields = config.model_dump(mode="json")
    made = base64.b64encode(_mac(keys, _canonical(fields))).decode()
    return json.dumps({**fields, _MAC: made}, indent=2).encode()


def decode_config(raw: bytes, url: str) -> StoredConfig:
    """The config stored at `url`, not yet verified; RepositoryError for another format."""
    fields = config_fields(raw, url)
    version = fields.get("version")
    if version != FORMAT_VERSION:
        raise unsupported(url, version)
    stored = fields.pop(_MAC, None)
    try:
        config = RepoConfig.model_validate(fields)
        made = base64.b64decode(stored, validate=True) if isinstance(stored, str) else b""
    except (ValidationError, binascii.Error):
        raise _malformed(url) from None
    return StoredConfig(config, _canonical(fields), made)


def config_fields(raw: bytes, url: str) -> dict[str, Any]:
    """The members of the config stored at `url`, of any format; CorruptObjectError unless it is
    a JSON object that names each member once."""
    try:
        fields = json.loads(raw, object_pairs_hook=_members)
    except ValueError:
        fields = None
    if not isinstance(fields, dict):
        raise _malformed(url)
    return fields


def upgraded_config(fields: dict[str, Any], url: str) -> RepoConfig:
    """The format-3 config that the members of a format-2 config (which carries no MAC) make:
    the same, the version changed; RepositoryError for another format."""
    version = fields.get("version")
    if version != UPGRADABLE_VERSION:
        raise unsupported(url, version)
    try:
        return RepoConfig.model_validate({**fields, "version": FORMAT_VERSION})
    except ValidationError:
        raise _malformed(url) from None


def _malformed(url: str) -> CorruptObjectError:
    return CorruptObjectError(f"{url}: config is malformed", objects=("config",))


def verify_config(stored: StoredConfig, keys: Keys, url: str) -> None:
    """TamperingError unless the config's MAC is the one `keys` make."""
    if not hmac.compare_digest(stored.mac, _mac(keys, stored.canonical)):
        raise TamperingError(
            f"the config of {url} does not match its MAC under the repository keys: someone "
            "with write access to its storage changed it; do not use this repository until "
            "you know who"
        )


def _mac(keys: Keys, canonical: bytes) -> bytes:
    material = keys.ids if keys.data is None else keys.data + keys.ids
    return mac(material, _PURPOSE, canonical)


def _canonical(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's members; ValueError when one is named twice."""
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("a member is named twice")
    return found


def unsupported(url: str, version: object) -> RepositoryError:
    """The error for a repository at `url` whose config says it is of format `version`."""
    if version == UPGRADABLE_VERSION:
        advice = (
            f"format {version}, whose config is not authenticated; this diskferry reads format "
            f"{FORMAT_VERSION} only: run 'diskferry repo upgrade --repo {url}' to authenticate "
            "it under the repository keys"
        )
    elif isinstance(version, int) and version < FORMAT_VERSION:
        advice = (
            f"format {version}, whose config is not authenticated; this diskferry reads format "
            f"{FORMAT_VERSION} only: restore what you need with the diskferry that wrote it, "
            "and back up into a new repository"
        )
    else:
        advice = f"format {version}; this diskferry reads format {FORMAT_VERSION} only"
    return RepositoryError(f"{url} is a repository of {advice}", reason="UnsupportedFormat")
