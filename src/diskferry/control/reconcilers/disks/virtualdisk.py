"""VirtualDisk: a claim filled from HTTP, an image or a snapshot, or left blank; Deckhouse's
phases Pending, Provisioning, Ready, Failed, PVCLost and Terminating. A blank disk that a
DataDownload made to restore into (labelled with its uid) stays Provisioning until that
download Completed, saying WaitingForDataDownload once its claim is made blank, and fails when
the download failed or is gone."""

from __future__ import annotations

from typing import Any

from diskferry.control.host.volumes import Claim
from diskferry.control.reconcilers.disks.claimlife import ClaimedKind, Filling, age
from diskferry.control.resources.common import DataSource
from diskferry.control.resources.datadownload import MADE_BY, DataDownload
from diskferry.control.resources.datamover import ENDED, MoverPhase
from diskferry.control.resources.model import Reason
from diskferry.control.resources.quantity import format_bytes
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS, VirtualDisk
from diskferry.control.runtime.phases import PROVISIONING, READY

WAITING_FOR_RESTORE = Reason("WaitingForDataDownload")
RESTORE_LOST = Reason("DataDownloadNotCompleted")


def awaits_restore(disk: VirtualDisk) -> bool:
    """Whether the disk's claim is made blank and waits for the DataDownload that restores into
    it (a claim in a cluster is ready only once that download Completed)."""
    ready = next((c for c in disk.status.conditions if c.type == READY), None)
    return (
        disk.status.phase == PROVISIONING
        and ready is not None
        and ready.reason == WAITING_FOR_RESTORE
    )


class VirtualDiskReconciler(ClaimedKind):
    """Makes each VirtualDisk's claim and fills it; the disk grows to the claim's size."""

    info = VIRTUAL_DISKS
    prefix = "vd"

    def storage_class_name(self, obj: VirtualDisk) -> str | None:
        """The class the disk's claim asks for."""
        return obj.spec.persistent_volume_claim.storage_class_name

    def size(self, obj: VirtualDisk) -> int | None:
        """The claim's size, None when the image decides it."""
        return obj.spec.persistent_volume_claim.size_bytes

    def data_source(self, obj: VirtualDisk) -> DataSource | None:
        """The disk's source, None for a blank disk."""
        return obj.spec.data_source

    def filled_elsewhere(self, obj: VirtualDisk) -> Filling | None:
        """The DataDownload that restores into the disk, until it Completed."""
        uid = obj.metadata.labels.get(MADE_BY)
        if uid is None:
            return None
        download = next((d for d in self.client.list(DataDownload) if d.metadata.uid == uid), None)
        if download is None:
            return Filling(
                RESTORE_LOST, "the DataDownload that was restoring the disk is gone", failed=True
            )
        where = f"DataDownload {download.metadata.namespace}/{download.metadata.name}"
        phase = download.status.phase
        if phase == MoverPhase.COMPLETED:
            return None
        if phase in ENDED:
            return Filling(RESTORE_LOST, f"the {where} that restores the disk is {phase}", True)
        return Filling(WAITING_FOR_RESTORE, f"the {where} restores the disk")

    def resized_fields(self, obj: VirtualDisk, claim: Claim) -> dict[str, Any]:
        """The capacity the claim has now."""
        return {"capacity": format_bytes(claim.size())}

    def waited_fields(self, obj: VirtualDisk) -> dict[str, Any]:
        """How long the disk waited for its image or snapshot."""
        return {"stats": {"creationDuration": {"waitingForDependencies": age(obj)}}}

    def ready_fields(
        self, obj: VirtualDisk, claim: Claim, result: dict[str, Any]
    ) -> dict[str, Any]:
        """Capacity, how long the disk took, and the source's uid."""
        fields: dict[str, Any] = {
            "capacity": format_bytes(claim.size()),
            "stats": {"creationDuration": {"totalProvisioning": age(obj)}},
        }
        if result.get("sourceUID"):
            fields["sourceUID"] = result["sourceUID"]
        return fields
