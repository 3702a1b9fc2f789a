"""A Backup's volume policy applied to one block device: the first rule that matches decides;
with none, VirtualDisks go through the data mover and images are skipped, saying why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diskferry.control.resources.backup import VolumePolicy, VolumeType

CLOUD_INIT = "diskferry.io/cloud-init"
"""A disk or image labelled with this key and "true" is a cloud-init volume."""


@dataclass(frozen=True)
class Decision:
    """Whether the device is backed up, and why."""

    action: str
    reason: str


def volume_type(kind: str, labels: dict[str, str]) -> VolumeType:
    """What a block device is: cloud-init by label, a cdrom when an image, a disk otherwise."""
    if labels.get(CLOUD_INIT, "").lower() == "true":
        return VolumeType.CLOUD_INIT
    return VolumeType.DISK if kind == "VirtualDisk" else VolumeType.CDROM


def decide(policy: VolumePolicy | None, kind: str, obj: dict[str, Any] | None) -> Decision:
    """The action for the block device of `kind` whose object (None when missing) is `obj`."""
    meta = (obj or {}).get("metadata") or {}
    labels = meta.get("labels") or {}
    storage_class = (
        ((obj or {}).get("spec") or {}).get("persistentVolumeClaim", {}).get("storageClassName")
    )
    kind_of = volume_type(kind, labels)
    rules = policy.volume_policies if policy is not None else []
    for number, rule in enumerate(rules, 1):
        c = rule.conditions
        if c.volume_types is not None and kind_of not in c.volume_types:
            continue
        if c.pvc_labels is not None and any(labels.get(k) != v for k, v in c.pvc_labels.items()):
            continue
        if c.storage_class is not None and storage_class not in c.storage_class:
            continue
        said = f"volume policy rule {number} ({rule.action.type})"
        if rule.action.type == "skip":
            return Decision("skip", f"skipped by {said}")
        if kind_of is VolumeType.CDROM:
            return Decision("skip", f"{said} matched, but an image is not moved by the data mover")
        return Decision("backup", f"backed up by {said}")
    if kind != "VirtualDisk":
        return Decision("skip", "an image attached read-only is not backed up (no rule matched)")
    return Decision("backup", "backed up (no volume policy rule matched)")
