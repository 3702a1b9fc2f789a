"""The manifests a Backup keeps in its repository, for a Restore on any machine: named
`<namespace>.<backup>`, written and read by a backup worker's chores."""

from __future__ import annotations

from typing import Any

from diskferry.backup import ChoresResult, MetadataRead
from diskferry.control.runtime.runner.jobs import Succeeded

KEPT_METADATA = ("name", "namespace", "labels", "annotations")
SYNCED_FROM = "diskferry.io/synced-from"
"""On a Backup a location's sync made from the repository's metadata: the location's name."""
READ_FILE = "read.json"
"""The file a backup worker writes what its chores read of the metadata to (its `output`)."""


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


def metadata_read(done: Succeeded[ChoresResult]) -> MetadataRead:
    """What the chores of `done` (a job whose `output` was READ_FILE) read of the metadata:
    nothing when they read none."""
    data = done.outputs.get(READ_FILE) if done.result.read else None
    return MetadataRead() if data is None else MetadataRead.model_validate_json(data)
