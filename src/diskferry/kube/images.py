"""The image store in a cluster (`host.images`): none yet, and images kept in claims instead.

The embedded host keeps its images as OCI layouts in its data directory, which no worker Pod
can reach. A cluster's store is a registry (the DVCR role): its workers would push to it and
read from it with credentials their Pods are given, and what the embedded host asks of its
store in the daemon (whether an image is there, removing one) would be asked of workers, as the
operator holds no storage credentials. Until then an image kept in the store (every
ClusterVirtualImage, a VirtualImage with `storage: ContainerRegistry`) fails with the reason
ImageStoreUnavailable, saying to keep it in a claim (a VirtualImage with `storage:
PersistentVolumeClaim`), which the cluster shape supports: a worker Pod fills its PVC, and the
disks made from it are copied by worker Pods that mount it.
"""

from __future__ import annotations

from diskferry.control.host.images import REPOSITORIES, ImageNotStoredError, StoredDisk
from diskferry.control.host.volumes import VolumeClass
from diskferry.control.resources.model import Resource

UNAVAILABLE = (
    "this cluster has no image store (the DVCR role) for diskferry yet: keep the image in a "
    "claim instead, a VirtualImage with spec.storage PersistentVolumeClaim"
)


class NoImageStore:
    """The image store of a cluster that has none: it keeps nothing, and says why."""

    @property
    def staging(self) -> VolumeClass:
        """A class no claim is ever made in: nothing is staged for a store that is not there."""
        return VolumeClass("no-image-store")

    def unavailable(self) -> str | None:
        """Why no image can be kept: there is no store."""
        return UNAVAILABLE

    def reference(self, obj: Resource) -> str:
        """The repository and tag the image would have in a store: `vi/<ns>/<name>:<uid>`."""
        meta = obj.metadata
        parts = [REPOSITORIES[obj.kind], *([meta.namespace] if meta.namespace else []), meta.name]
        return f"{'/'.join(str(part) for part in parts)}:{meta.uid}"

    def disk(self, obj: Resource) -> StoredDisk:
        """ImageNotStoredError: there is no store to open a disk in."""
        raise ImageNotStoredError(UNAVAILABLE)

    def holds(self, reference: str) -> bool:
        """False: nothing is kept."""
        return False

    def remove(self, reference: str) -> None:
        """Nothing: nothing is kept."""
