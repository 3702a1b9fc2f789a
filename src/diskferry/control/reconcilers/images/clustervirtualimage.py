"""ClusterVirtualImage: an image every namespace can use, always kept in the image store (see
`registryimage`); its objectRef names the source's namespace; `usedInNamespaces` lists the
namespaces of the disks made from it (kept at each reconcile, the resync included)."""

from __future__ import annotations

from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.images import ImageStore
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import Volumes
from diskferry.control.reconcilers.images.registryimage import StoredImages
from diskferry.control.resources.virtualdisk import VirtualDisk, VirtualDiskObjectRefKind
from diskferry.control.resources.virtualimage import CLUSTER_VIRTUAL_IMAGES, ClusterVirtualImage
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.phases import READY, status_of, update_fields
from diskferry.control.runtime.reconciler import Result
from diskferry.control.runtime.runner.base import Runner

CLUSTER_VIRTUAL_IMAGE = VirtualDiskObjectRefKind.CLUSTER_VIRTUAL_IMAGE


class ClusterVirtualImageReconciler:
    """Stores each ClusterVirtualImage's source in the image store."""

    info = CLUSTER_VIRTUAL_IMAGES
    prefix = "cvi"

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        store: ImageStore,
        certs: ServerCerts | None = None,
        proxy: ExportProxy | None = None,
    ) -> None:
        self.stored = StoredImages(client, runner, volumes, store, self.prefix, certs, proxy)

    def job_id(self, obj: ClusterVirtualImage) -> str:
        """The id of the image's push job."""
        return self.stored.job_id(obj)

    def reconcile(self, obj: ClusterVirtualImage) -> Result:
        """One step of the image's life; once Ready, the namespaces whose disks use it."""
        result = self.stored.reconcile(obj, obj.spec.data_source, None)
        current = self.stored.client.get(ClusterVirtualImage, None, obj.metadata.name or "")
        if current is not None and status_of(current).get("phase") == READY:
            used = sorted(self._users(current.metadata.name or ""))
            update_fields(self.stored.client, current, {"usedInNamespaces": used or None})
        return result

    def _users(self, name: str) -> set[str]:
        """The namespaces of the VirtualDisks made from the image `name`."""
        found = set()
        for disk in self.stored.client.list(VirtualDisk):
            ref = disk.spec.data_source and disk.spec.data_source.object_ref
            if ref and ref.kind == CLUSTER_VIRTUAL_IMAGE and ref.name == name:
                found.add(disk.metadata.namespace or "")
        return found
