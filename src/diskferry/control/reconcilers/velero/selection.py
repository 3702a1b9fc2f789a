"""Which kinds a Backup's or a Restore's resource filters take, as Velero matches them: names
resolved as kubectl resolves them (kind, plural, singular or short name, with or without the
group), `*` for all, exclusions winning over inclusions; and which ClusterVirtualImages go
with the VMs (Velero's includeClusterResources rule: all, those the VMs mount, or none)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from diskferry.control.errors import NotFoundError
from diskferry.control.resources.backup import BackupSpec
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.selection import Selection

VM = "VirtualMachine"
DISK = "VirtualDisk"
IMAGE = "VirtualImage"
CLUSTER_IMAGE = "ClusterVirtualImage"


class ClusterImages(StrEnum):
    """Which ClusterVirtualImages are taken."""

    ALL = "all"
    RELATED = "related"
    NONE = "none"


@dataclass(frozen=True)
class Taken:
    """The kinds the filters take."""

    vms: bool
    disks: bool
    images: bool
    cluster_images: ClusterImages


def _kinds(names: Sequence[str]) -> set[str] | None:
    """The kinds `names` name (None for `*`: every kind); names of no kind here are dropped."""
    kinds = set()
    for name in names:
        if name == "*":
            return None
        try:
            kinds.add(REGISTRY.lookup(name).kind)
        except NotFoundError:
            continue
    return kinds


def kind_taken(kind: str, included: Sequence[str], excluded: Sequence[str]) -> bool:
    """Whether `kind` passes `included` (empty: all) and `excluded`."""
    out = _kinds(excluded)
    if out is None or kind in out:
        return False
    wanted = _kinds(included) if included else None
    return wanted is None or kind in wanted


def _cluster(spec: Selection, passes: bool) -> ClusterImages:
    """The old rule: includeClusterResources, or, unset, all only with every namespace."""
    if not passes or spec.include_cluster_resources is False:
        return ClusterImages.NONE
    if spec.include_cluster_resources or spec.all_namespaces():
        return ClusterImages.ALL
    return ClusterImages.RELATED


def _new_filters(spec: BackupSpec) -> bool:
    return bool(
        spec.included_cluster_scoped_resources
        or spec.excluded_cluster_scoped_resources
        or spec.included_namespace_scoped_resources
        or spec.excluded_namespace_scoped_resources
    )


def backup_taken(spec: BackupSpec) -> Taken:
    """What a Backup's filters take, by Velero's old filters or its newer scoped ones."""
    if not _new_filters(spec):
        included, excluded = spec.included_resources, spec.excluded_resources
        cluster = _cluster(spec, kind_taken(CLUSTER_IMAGE, included, excluded))
    else:
        included = spec.included_namespace_scoped_resources
        excluded = spec.excluded_namespace_scoped_resources
        out = _kinds(spec.excluded_cluster_scoped_resources)
        wanted = _kinds(spec.included_cluster_scoped_resources)
        if out is None or CLUSTER_IMAGE in out:
            cluster = ClusterImages.NONE
        elif wanted is None or CLUSTER_IMAGE in wanted:
            cluster = ClusterImages.ALL
        else:
            cluster = ClusterImages.RELATED
    return Taken(
        vms=kind_taken(VM, included, excluded),
        disks=kind_taken(DISK, included, excluded),
        images=kind_taken(IMAGE, included, excluded),
        cluster_images=cluster,
    )


def restore_taken(spec: Selection) -> Taken:
    """What a Restore's filters take."""
    included, excluded = spec.included_resources, spec.excluded_resources
    return Taken(
        vms=kind_taken(VM, included, excluded),
        disks=kind_taken(DISK, included, excluded),
        images=kind_taken(IMAGE, included, excluded),
        cluster_images=_cluster(spec, kind_taken(CLUSTER_IMAGE, included, excluded)),
    )
