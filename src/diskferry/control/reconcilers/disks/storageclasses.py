"""StorageClasses as claims see them: the class a claim names or the default, and its volumes."""

from __future__ import annotations

from pathlib import Path

from diskferry.base.errors import DiskferryError
from diskferry.control.host.volumes import VolumeClass, Volumes
from diskferry.control.reconcilers.disks.claimmodes import claim_modes
from diskferry.control.resources.model import ObjectMeta
from diskferry.control.resources.storageclass import (
    DEFAULT_CLASS_ANNOTATION,
    ReclaimPolicy,
    StorageClass,
    VolumeType,
)
from diskferry.control.runtime.client import Client

DEFAULT_CLASS = "local"
BLOCK_CLASS = "local-block"


class StorageClassError(DiskferryError):
    """The StorageClass a claim needs does not exist."""

    reason = "StorageClassNotFound"


def volume_class(storage_class: StorageClass) -> VolumeClass:
    """Where and how the class keeps its claims, who makes them, and how they are asked for."""
    path = storage_class.local_parameters.path
    modes = claim_modes(storage_class)
    return VolumeClass(
        storage_class.metadata.name or "",
        modes.type,
        Path(path) if path else None,
        retain=storage_class.reclaim_policy is ReclaimPolicy.RETAIN,
        provisioner=storage_class.provisioner,
        access_mode=modes.access_mode,
    )


def resolve(client: Client, name: str | None) -> VolumeClass:
    """The class named, or the default one when `name` is None; StorageClassError otherwise."""
    if name:
        found = client.get(StorageClass, None, name)
        if found is None:
            raise StorageClassError(f"the StorageClass {name} does not exist")
        return volume_class(found)
    defaults = [sc for sc in client.list(StorageClass) if sc.is_default]
    if not defaults:
        raise StorageClassError("no StorageClass is the default: name one in storageClassName")
    return volume_class(sorted(defaults, key=lambda sc: sc.metadata.name or "")[0])


def default_classes(volumes: Volumes) -> list[StorageClass]:
    """The classes a fresh daemon starts with: `local` (files, the default), and `local-block`
    (loop devices) where `volumes` offers block claims."""
    made = [
        StorageClass(
            metadata=ObjectMeta(name=DEFAULT_CLASS, annotations={DEFAULT_CLASS_ANNOTATION: "true"}),
        )
    ]
    if volumes.block_unavailable() is None:
        made.append(
            StorageClass(
                metadata=ObjectMeta(name=BLOCK_CLASS),
                parameters={"type": VolumeType.BLOCK.value},
            )
        )
    return made


def ensure_default_classes(client: Client, volumes: Volumes) -> None:
    """Create the default classes when there is no StorageClass at all."""
    if client.list(StorageClass):
        return
    for storage_class in default_classes(volumes):
        client.create(storage_class)
