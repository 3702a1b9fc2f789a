"""A location's Backups synced from its repository, as Velero's backup sync does: each Backup
of the location's namespace whose metadata the repository holds (made by any host) and that
is missing here is made, annotated `diskferry.io/synced-from` (the Backup reconciler takes its
status from the metadata); a Backup synced earlier whose metadata is gone is deleted. The
repository's metadata is listed, and the documents of the Backups missing here read, by a
backup worker's chores (`listing`)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from diskferry.backup import MetadataListing, MetadataRead
from diskferry.control.reconcilers.velero.manifests import SYNCED_FROM, metadata_name
from diskferry.control.resources.backup import Backup, BackupPhase
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.model import API_VERSION
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting

KEPT = (BackupPhase.COMPLETED, BackupPhase.PARTIALLY_FAILED)


@dataclass
class Synced:
    """What a sync did, and the repository's metadata revision it saw."""

    revision: str
    made: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)


def listing(client: Client, bsl: BackupStorageLocation) -> MetadataListing:
    """What a sync of `bsl` reads: the repository's metadata names, and the documents of its
    namespace's Backups that this host lacks."""
    namespace = bsl.metadata.namespace or "default"
    here = [metadata_name(namespace, b.metadata.name or "") for b in client.list(Backup, namespace)]
    return MetadataListing(prefix=metadata_name(namespace, ""), known=here)


def sync_backups(client: Client, bsl: BackupStorageLocation, read: MetadataRead) -> Synced:
    """Make the Backups of `bsl`'s namespace whose documents `read` holds (a `listing`'s) and
    this host lacks; delete those synced from it whose metadata is gone."""
    namespace = bsl.metadata.namespace or "default"
    names = read.names or []
    prefix = metadata_name(namespace, "")
    held = {name[len(prefix) :] for name in names if name.startswith(prefix)}
    done = Synced(hashlib.sha256("\n".join(names).encode()).hexdigest()[:16])
    for name in sorted(held):
        if client.get(Backup, namespace, name) is not None:
            continue
        document = read.documents.get(metadata_name(namespace, name))
        if document is None:
            continue
        manifest = document.get("backup") or {}
        meta = manifest.get("metadata") or {}
        annotations = {**(meta.get("annotations") or {}), SYNCED_FROM: bsl.metadata.name or ""}
        body = {
            "apiVersion": API_VERSION,
            "kind": "Backup",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": meta.get("labels") or {},
                "annotations": annotations,
            },
            "spec": {**(manifest.get("spec") or {}), "storageLocation": bsl.metadata.name},
        }
        client.create(Backup.model_validate(body))
        done.made.append(name)
    for backup in client.list(Backup, namespace):
        name = backup.metadata.name or ""
        mine = backup.metadata.annotations.get(SYNCED_FROM) == bsl.metadata.name
        if not mine or name in held or deleting(backup) or backup.status.phase not in KEPT:
            continue
        client.delete(Backup, namespace, name)
        done.deleted.append(name)
    return done
