"""VirtualImage: kept in the image store (`storage: ContainerRegistry`, the default; see
`registryimage`), or in a claim of its own (`storage: PersistentVolumeClaim`), imported as a
disk is; its status gives the stored and unpacked sizes, the format, and whether it is a
CD-ROM image."""

from __future__ import annotations

from typing import Any

from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.images import ImageStore
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import Claim, Volumes
from diskferry.control.reconcilers.disks.claimlife import ClaimedKind
from diskferry.control.reconcilers.disks.datasources import in_store
from diskferry.control.reconcilers.images.registryimage import StoredImages
from diskferry.control.resources.common import DataSource
from diskferry.control.resources.quantity import format_bytes
from diskferry.control.resources.virtualimage import VIRTUAL_IMAGES, VirtualImage
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result
from diskferry.control.runtime.runner.base import Runner


def _size(n: int) -> tuple[str, str]:
    return format_bytes(n), str(n)


class VirtualImageReconciler(ClaimedKind):
    """Stores each VirtualImage's source in the image store, or imports it into its claim."""

    info = VIRTUAL_IMAGES
    prefix = "vi"

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        store: ImageStore,
        certs: ServerCerts | None = None,
        proxy: ExportProxy | None = None,
    ) -> None:
        super().__init__(client, runner, volumes, store, certs, proxy)
        self.stored = StoredImages(client, runner, volumes, store, self.prefix, certs, proxy)

    def reconcile(self, obj: VirtualImage) -> Result:
        """One step: through the store for ContainerRegistry, through a claim otherwise."""
        if in_store(obj):
            return self.stored.reconcile(obj, obj.spec.data_source, obj.metadata.namespace)
        return super().reconcile(obj)

    def storage_class_name(self, obj: VirtualImage) -> str | None:
        """The class the image's claim asks for."""
        return obj.spec.persistent_volume_claim.storage_class_name

    def size(self, obj: VirtualImage) -> int | None:
        """The image decides its claim's size."""
        return None

    def data_source(self, obj: VirtualImage) -> DataSource:
        """The image's source."""
        return obj.spec.data_source

    def ready_fields(
        self, obj: VirtualImage, claim: Claim, result: dict[str, Any]
    ) -> dict[str, Any]:
        """Sizes stored and unpacked, the format, CD-ROM or not."""
        stored, stored_bytes = _size(claim.allocated())
        unpacked, unpacked_bytes = _size(int(result.get("virtualSize") or claim.size()))
        fields: dict[str, Any] = {
            "size": {
                "stored": stored,
                "storedBytes": stored_bytes,
                "unpacked": unpacked,
                "unpackedBytes": unpacked_bytes,
            },
            "format": result.get("sourceFormat") or "raw",
            "cdrom": result.get("sourceFormat") == "iso",
        }
        if result.get("sourceUID"):
            fields["sourceUID"] = result["sourceUID"]
        return fields
