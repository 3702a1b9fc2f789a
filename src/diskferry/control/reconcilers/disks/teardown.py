"""Deleting an object that owns a claim: its worker stopped, its files and its claim removed
(kept where its StorageClass says Retain), then its finalizer, so nothing is left behind."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from diskferry.control.host.volumes import VolumeClass, VolumeError, Volumes
from diskferry.control.reconcilers.disks.datasources import claim_name, claim_of
from diskferry.control.reconcilers.disks.importjob import Imports
from diskferry.control.resources.model import Resource
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import release
from diskferry.control.runtime.phases import TERMINATING, status_of, transition
from diskferry.control.runtime.reconciler import Result

STOP_POLL = 0.5


def terminate(
    client: Client,
    volumes: Volumes,
    imports: Imports,
    obj: Resource,
    job_ids: Sequence[str],
    wanted: VolumeClass | None = None,
) -> Result:
    """One step of the delete: Terminating, its jobs stopped, the claim removed, released; with
    no claim file found (an import that failed), what is left of it in the class it was `wanted`
    in (its folder, when empty) is removed."""
    if status_of(obj).get("phase") != TERMINATING:
        obj = transition(client, obj, TERMINATING, TERMINATING, "being deleted")
    if not all([imports.stop(job_id) for job_id in job_ids]):
        return Result.requeue(STOP_POLL)
    claim = claim_of(client, volumes, obj)
    if claim is not None and not claim.volume_class.retain:
        volumes.remove(claim.volume_class, claim.namespace, claim.name)
    elif claim is None and wanted is not None and not wanted.retain:
        with contextlib.suppress(VolumeError):  # a class refused holds nothing of it
            volumes.remove(wanted, obj.metadata.namespace or "", claim_name(obj))
    release(client, obj)
    return Result.done()
