"""VirtualDataExport, as Deckhouse has it: a disk, a snapshot or a disk's claim served for a
download through a VirtualMachineExport it makes and owns, until nobody has downloaded for
`idleTimeout`.

The VirtualMachineExport (`vde-<name>`, owned, so that deleting the vde deletes it and stops
its server) brings the token Secret, the export server and the route through the proxy; the
vde's status shows its raw disk's external URL, the CA in base64 (as Deckhouse's DataExport)
and the token's Secret. Activity is the export server's own count of the requests its token
let in and of those under way (its job's details): the idle time runs from when the URL is
ready and from the last request seen, never while one is under way, and is kept in memory (a
daemon started again counts it anew). Phases are the `Completed` condition's reasons, as
Deckhouse's: Pending, WaitForUserDownload, InProgress, Completed (True), Expired (no download
within the idle timeout), Failed (an image target, or a source the export cannot serve). On
Expired, and on Completed once idle, the VirtualMachineExport is deleted and `url` cleared.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import datetime
from typing import Any

from diskferry.control.clock import Clock
from diskferry.control.reconcilers.disks.claimlife import POLL_SECONDS, WAIT_SECONDS
from diskferry.control.resources.model import GROUP, ObjectMeta, OwnerReference
from diskferry.control.resources.typedref import CORE
from diskferry.control.resources.vdexport import (
    COMPLETED,
    VIRTUAL_DATA_EXPORTS,
    DataExportPhase,
    DataExportTargetKind,
    VirtualDataExport,
)
from diskferry.control.resources.vmexport import (
    ExportPhase,
    ExportSource,
    ExportVolumeFormat,
    VirtualMachineExport,
    VirtualMachineExportSpec,
)
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import find, set_condition
from diskferry.control.runtime.finalizer import deleting
from diskferry.control.runtime.phases import READY, status_of
from diskferry.control.runtime.progress import job_details
from diskferry.control.runtime.reconciler import Result
from diskferry.control.runtime.runner.base import Runner

EXPORT_PREFIX = "vde-"
EXPORT_TTL = "720h"
"""The owned VirtualMachineExport's TTL: past any idle timeout, since the vde ends it."""
CHECK_SECONDS = 2.0
IMAGES = (DataExportTargetKind.VIRTUAL_IMAGE, DataExportTargetKind.CLUSTER_VIRTUAL_IMAGE)
NOT_SERVED = (
    "exporting a {kind} is not served here: make a VirtualDisk from it (dataSource objectRef "
    "kind {kind}) and export the disk"
)
ENDED = {"url": None, "ca": None}


def export_name(obj: VirtualDataExport) -> str:
    """The name of the VirtualMachineExport that serves `obj`."""
    return f"{EXPORT_PREFIX}{obj.metadata.name}"


def _source(obj: VirtualDataExport) -> ExportSource:
    target = obj.spec.target_ref
    group = CORE if target.kind is DataExportTargetKind.PERSISTENT_VOLUME_CLAIM else GROUP
    return ExportSource.model_validate(
        {"apiGroup": group, "kind": target.kind.value, "name": target.name}
    )


def _owned(obj: VirtualDataExport) -> VirtualMachineExport:
    owner = OwnerReference(
        apiVersion=obj.api_version,
        kind=obj.kind,
        name=obj.metadata.name or "",
        uid=obj.metadata.uid or "",
        controller=True,
        blockOwnerDeletion=True,
    )
    return VirtualMachineExport(
        metadata=ObjectMeta(
            name=export_name(obj), namespace=obj.metadata.namespace, ownerReferences=[owner]
        ),
        spec=VirtualMachineExportSpec(source=_source(obj), ttlDuration=EXPORT_TTL),
    )


def _raw_link(export: VirtualMachineExport) -> tuple[str, str] | None:
    """The external raw disk URL and CA (PEM) of a Ready export, None before it has them."""
    links = export.status.links
    side = links.external if links is not None else None
    if side is None or side.cert is None:
        return None
    for volume in side.volumes:
        for link in volume.formats:
            if link.format is ExportVolumeFormat.RAW:
                return link.url, side.cert
    return None


def _export_message(export: VirtualMachineExport) -> str:
    ready = find(status_of(export).get("conditions") or [], READY)
    why = (ready or {}).get("message") or "it is starting"
    return f"waiting for the VirtualMachineExport {export.metadata.name}: {why}"


class VirtualDataExportReconciler:
    """Serves each VirtualDataExport through a VirtualMachineExport until it is idle."""

    info = VIRTUAL_DATA_EXPORTS

    def __init__(
        self,
        client: Client,
        runner: Runner,
        job_id: Callable[[VirtualMachineExport], str],
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.job_id = job_id
        self.clock = clock or Clock()
        # uid -> (requests served when last seen changing, when that was)
        self.seen: dict[str, tuple[int, datetime]] = {}

    def reconcile(self, obj: VirtualDataExport) -> Result:
        """One step of the export's life."""
        uid = obj.metadata.uid or ""
        if deleting(obj):  # its VirtualMachineExport goes with it, as an owned object
            self.seen.pop(uid, None)
            return Result.done()
        phase = obj.status.phase
        if phase in (DataExportPhase.EXPIRED, DataExportPhase.FAILED) or (
            phase is DataExportPhase.COMPLETED and obj.status.url is None
        ):
            return self._end(obj)
        kind = obj.spec.target_ref.kind
        if kind in IMAGES:
            return self._fail(obj, NOT_SERVED.format(kind=kind.value))
        export = self._export(obj)
        if isinstance(export, str):
            return self._write(obj, DataExportPhase.PENDING, export, ENDED, WAIT_SECONDS)
        if export.status.phase is ExportPhase.SKIPPED:
            return self._fail(obj, _export_message(export))
        link = _raw_link(export)
        if export.status.phase is not ExportPhase.READY or link is None:
            return self._write(obj, DataExportPhase.PENDING, _export_message(export), ENDED)
        return self._serving(obj, export, *link)

    def _export(self, obj: VirtualDataExport) -> VirtualMachineExport | str:
        """The VirtualMachineExport this vde owns, made when missing; why not, when another
        object has its name."""
        name = export_name(obj)
        found = self.client.get(VirtualMachineExport, obj.metadata.namespace, name)
        if found is None:
            return self.client.create(_owned(obj))
        if obj.metadata.uid not in {ref.uid for ref in found.metadata.owner_references}:
            return f"the VirtualMachineExport {name} exists and is not this export's: delete it"
        return found

    def _serving(
        self, obj: VirtualDataExport, export: VirtualMachineExport, url: str, ca: str
    ) -> Result:
        details = job_details(self.runner.state(self.job_id(export)))
        served = int(details.get("requestsServed", 0))
        under_way = int(details.get("requestsInFlight", 0))
        now = self.clock.now()
        uid = obj.metadata.uid or ""
        before = self.seen.get(uid)
        if before is None or before[0] != served or under_way:
            before = self.seen[uid] = (served, now)
        left = (obj.spec.idle - (now - before[1])).total_seconds()
        if left <= 0:
            if served:
                message = f"downloaded; nothing for {obj.spec.idle_timeout}: its server is stopped"
                return self._write(obj, DataExportPhase.COMPLETED, message, ENDED, 0)
            message = f"nothing downloaded in {obj.spec.idle_timeout}: its server is stopped"
            return self._write(obj, DataExportPhase.EXPIRED, message, ENDED, 0)
        if obj.status.phase is DataExportPhase.COMPLETED or (served and not under_way):
            phase, message = DataExportPhase.COMPLETED, f"downloaded from {url}"
        elif under_way:
            phase, message = DataExportPhase.IN_PROGRESS, f"a download from {url} is under way"
        else:
            phase = DataExportPhase.WAIT_FOR_USER_DOWNLOAD
            message = f"ready for download: {url}, with the token in the Secret " + (
                export.status.token_secret_ref or ""
            )
        fields = {
            "url": url,
            "ca": base64.b64encode(ca.encode()).decode(),
            "tokenSecretRef": export.status.token_secret_ref,
        }
        return self._write(obj, phase, message, fields, min(CHECK_SECONDS, max(left, POLL_SECONDS)))

    def _fail(self, obj: VirtualDataExport, message: str) -> Result:
        return self._write(obj, DataExportPhase.FAILED, message, ENDED, 0)

    def _write(
        self,
        obj: VirtualDataExport,
        phase: DataExportPhase,
        message: str,
        fields: dict[str, Any],
        after: float = POLL_SECONDS,
    ) -> Result:
        """Write the phase, its Completed condition and `fields` when any changed, with an Event
        when the phase does; requeue `after` seconds (0: end the export now)."""
        status = status_of(obj)
        found = status.get("conditions") or []
        done = phase is DataExportPhase.COMPLETED
        conditions = set_condition(
            obj, found, COMPLETED, done, phase.value, message, obj.metadata.generation
        )
        wanted = {
            "phase": phase.value,
            "virtualMachineExportName": export_name(obj),
            "observedGeneration": obj.metadata.generation,
            **fields,
        }
        shown = ("status", "reason", "message")
        before = find(found, COMPLETED) or {}
        after_condition = find(conditions, COMPLETED) or {}
        same = all(before.get(k) == after_condition.get(k) for k in shown)
        if not same or any(status.get(k) != v for k, v in wanted.items()):
            if status.get("phase") != phase.value:
                warning = phase in (DataExportPhase.FAILED, DataExportPhase.EXPIRED)
                self.client.event(obj, "Warning" if warning else "Normal", phase.value, message)
            obj = self.client.patch_status(obj, {**wanted, "conditions": conditions})
        if after == 0:
            return self._end(obj)
        return Result.requeue(after)

    def _end(self, obj: VirtualDataExport) -> Result:
        """The export is over: its VirtualMachineExport deleted (its server stops)."""
        self.seen.pop(obj.metadata.uid or "", None)
        namespace, name = obj.metadata.namespace, export_name(obj)
        found = self.client.get(VirtualMachineExport, namespace, name)
        if found is not None and obj.metadata.uid in {
            ref.uid for ref in found.metadata.owner_references
        }:
            self.client.delete(VirtualMachineExport, namespace, name)
        return Result.done()
