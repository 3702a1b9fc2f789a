"""Backup metadata `metadata/<name>`: side objects (a control plane's manifests of what it
backed up), sealed and compressed like every other object and replaced whole."""

from __future__ import annotations

import json
from typing import Any

from diskferry.backup.bounds import read_whole
from diskferry.backup.codec import MAX_STORED
from diskferry.backup.errors import CorruptObjectError
from diskferry.backup.names import listing
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import check_name
from diskferry.objstore.errors import ObjectNotFoundError


def metadata_path(name: str) -> str:
    """The object path of the metadata `name`."""
    return f"metadata/{check_name('metadata', name)}"


def save_metadata(repo: Repository, name: str, document: dict[str, Any]) -> None:
    """Store `document` (JSON values) as the metadata `name`, replacing any before it."""
    path = metadata_path(name)
    repo.store.put(path, repo.codec.encode_meta(json.dumps(document).encode(), path))


def load_metadata(repo: Repository, name: str) -> dict[str, Any] | None:
    """The metadata `name`, or None when the repository has none of that name."""
    path = metadata_path(name)
    try:
        blob = read_whole(repo.store, path, MAX_STORED)
    except ObjectNotFoundError:
        return None
    try:
        document = json.loads(repo.codec.decode_meta(blob, path))
    except json.JSONDecodeError as e:
        raise CorruptObjectError(f"{path} is malformed ({e})", objects=(path,)) from None
    if not isinstance(document, dict):
        raise CorruptObjectError(f"{path} is not an object", objects=(path,))
    return document


def list_metadata(repo: Repository) -> list[str]:
    """The names of the repository's metadata, sorted."""
    return sorted(info.path.split("/", 1)[1] for info in listing(repo.store, "metadata"))


def delete_metadata(repo: Repository, name: str) -> None:
    """Remove the metadata `name`; nothing when the repository has none of that name."""
    repo.store.delete(metadata_path(name))
