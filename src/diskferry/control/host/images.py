"""The image store as reconcilers see it (the DVCR role): where the image of a VirtualImage or
ClusterVirtualImage is kept, whether it is there, and where a VM finds its disk; the embedded
host keeps OCI image layouts in its data directory, a cluster a registry (which the cluster
shape has not yet: see `diskferry.kube.images`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from diskferry.base.errors import DiskferryError
from diskferry.control.host.volumes import VolumeClass
from diskferry.control.resources.model import Resource

REPOSITORIES = {"VirtualImage": "vi", "ClusterVirtualImage": "cvi"}
"""The kinds kept in the store, and the repository each one's images are under."""


class ImageStoreUnavailableError(DiskferryError):
    """There is no image store here to keep an image in."""

    reason = "ImageStoreUnavailable"


class ImageNotStoredError(DiskferryError):
    """The store has no such image, or one whose disk cannot be opened in place."""

    reason = "ImageNotStored"


@dataclass(frozen=True)
class StoredDisk:
    """The disk of a stored image: the file holding it, where it starts there and how long it
    is, and its format (raw or qcow2)."""

    file: str
    offset: int
    size: int
    format: str


class ImageStore(Protocol):
    """Where images are kept, named by their references."""

    @property
    def staging(self) -> VolumeClass:
        """The class of the claims an image is staged in before it is stored (an upload)."""

    def unavailable(self) -> str | None:
        """Why no image can be kept in the store here, None when images can."""

    def reference(self, obj: Resource) -> str:
        """The reference of the image of a VirtualImage or ClusterVirtualImage."""

    def disk(self, obj: Resource) -> StoredDisk:
        """Where the disk of the image of `obj` lies in the store, for a VM to open read-only
        (ImageNotStoredError when it cannot be)."""

    def holds(self, reference: str) -> bool:
        """Whether the store has the image `reference` names."""

    def remove(self, reference: str) -> None:
        """Remove the image `reference` names (what other images share stays)."""
