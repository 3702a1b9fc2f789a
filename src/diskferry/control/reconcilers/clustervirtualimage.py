"""ClusterVirtualImage: an image every namespace can use, always kept in the image store (see
`stored`); its objectRef names the source's namespace."""

from __future__ import annotations

from diskferry.control.imagestore import ImageStore
from diskferry.control.reconcilers.exportcerts import ServerCerts
from diskferry.control.reconcilers.stored import StoredImages
from diskferry.control.resources.virtualimage import CLUSTER_VIRTUAL_IMAGES, ClusterVirtualImage
from diskferry.control.runner.base import Runner
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result
from diskferry.control.volumes import Volumes


class ClusterVirtualImageReconciler:
    """Stores each ClusterVirtualImage's source in the image store."""

    info = CLUSTER_VIRTUAL_IMAGES
    prefix = "cvi"

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        certs: ServerCerts | None = None,
        store: ImageStore | None = None,
    ) -> None:
        store = store or ImageStore(volumes.root.parent)
        self.stored = StoredImages(client, runner, volumes, store, self.prefix, certs)

    def job_id(self, obj: ClusterVirtualImage) -> str:
        """The id of the image's push job."""
        return self.stored.job_id(obj)

    def reconcile(self, obj: ClusterVirtualImage) -> Result:
        """One step of the image's life."""
        return self.stored.reconcile(obj, obj.spec.data_source, None)
