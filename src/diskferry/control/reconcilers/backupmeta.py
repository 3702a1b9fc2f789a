"""The manifests a Backup keeps in its repository, for a Restore on any machine: opened through
a storage location, named `<namespace>.<backup>`."""

from __future__ import annotations

from typing import Any

from diskferry.backup.metadata import load_metadata, save_metadata
from diskferry.backup.repository import Repository
from diskferry.control.reconcilers.location import Location

KEPT_METADATA = ("name", "namespace", "labels", "annotations")
SYNCED_FROM = "diskferry.io/synced-from"
"""On a Backup a location's sync made from the repository's metadata: the location's name."""


def metadata_name(namespace: str, backup: str) -> str:
    """The repository's name for the metadata of the Backup `namespace/backup`."""
    return f"{namespace}.{backup}"


def clean_manifest(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as it can be created again: kind, the user's metadata, spec; no status."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in KEPT_METADATA if meta.get(k)},
        "spec": obj.get("spec") or {},
    }


def store_document(location: Location, name: str, document: dict[str, Any]) -> None:
    """Write the metadata `name` into the location's repository."""
    with Repository.open(location.url, location.password, s3=location.s3()) as repo:
        save_metadata(repo, name, document)


def read_document(location: Location, name: str) -> dict[str, Any] | None:
    """The metadata `name` of the location's repository, None when it has none."""
    with Repository.open(location.url, location.password, s3=location.s3()) as repo:
        return load_metadata(repo, name)


def tracker_state(location: Location, vm: str) -> dict[str, Any] | None:
    """The repository's tracker of `vm` (its checkpoint chains), None when it has none."""
    with Repository.open(location.url, location.password, s3=location.s3()) as repo:
        tracker = repo.load_tracker(vm)
    return None if tracker is None else tracker.model_dump(mode="json")
