"""What an update may change: a disk's or an image's whole spec until its work starts (it is
Pending: no claim made, no worker started), then only a disk's size, to grow; the specs of
the other diskferry.io kinds are fixed at creation; a VirtualMachineClass's CPU is fixed, its
other fields may change."""

from __future__ import annotations

from typing import Any

from diskferry.control.errors import InvalidError
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import Resource
from diskferry.control.resources.quantity import parse_quantity
from diskferry.control.resources.storageclass import StorageClass
from diskferry.control.resources.vdexport import VirtualDataExport
from diskferry.control.resources.vdsnapshot import VirtualDiskSnapshot
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import ClusterVirtualImage, VirtualImage
from diskferry.control.resources.virtualmachineclass import VirtualMachineClass
from diskferry.control.resources.vmbackup import VirtualMachineBackup
from diskferry.control.resources.vmbackuptracker import VirtualMachineBackupTracker
from diskferry.control.resources.vmexport import VirtualMachineExport

IMMUTABLE = "field is immutable"
STORAGE_CLASS_FIXED = ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode")
SIZE = "spec.persistentVolumeClaim.size"
FIXED_SPEC = (
    VirtualDataExport,
    VirtualDiskSnapshot,
    VirtualMachineExport,
    VirtualMachineBackup,
    VirtualMachineBackupTracker,
)
IMAGES = (VirtualImage, ClusterVirtualImage)
UNSTARTED = (None, "Pending")
"""The phases of a disk or an image whose work has not started: no claim, no worker."""
CLAIM = "persistentVolumeClaim"


def started(obj: Resource) -> str | None:
    """The phase of a disk or an image whose work has started (so its spec is fixed), None
    while it has not."""
    phase = (obj.to_json().get("status") or {}).get("phase")
    return None if phase in UNSTARTED else phase


def _changed(before: dict[str, Any], after: dict[str, Any], prefix: str) -> list[str]:
    """The paths under `prefix` of the fields that differ, one level deep."""
    names = sorted(before.keys() | after.keys())
    return [f"{prefix}.{name}" for name in names if before.get(name) != after.get(name)]


def _disk_causes(old: VirtualDisk, new: VirtualDisk) -> list[tuple[str, str]]:
    phase = started(old)
    if phase is None:
        return []
    before, after = old.to_json()["spec"], new.to_json()["spec"]
    causes = []
    old_claim, new_claim = before.pop(CLAIM, {}), after.pop(CLAIM, {})
    old_size, new_size = old_claim.pop("size", None), new_claim.pop("size", None)
    if old_size is not None and new_size is None:
        causes.append((SIZE, f"may not be removed (it is {old_size})"))
    elif old_size is not None and parse_quantity(new_size) < parse_quantity(old_size):
        causes.append((SIZE, f"may only grow: {new_size} is less than {old_size}"))
    why = (
        f"{IMMUTABLE} once the disk has left Pending (it is {phase}: its claim is made or its "
        f"worker started); only {SIZE} may change, to grow"
    )
    changed = _changed(before, after, "spec") + _changed(old_claim, new_claim, f"spec.{CLAIM}")
    return causes + [(path, why) for path in sorted(changed)]


def _image_causes(old: Resource, new: Resource) -> list[tuple[str, str]]:
    phase = started(old)
    if phase is None:
        return []
    why = f"{IMMUTABLE} once the image has left Pending (it is {phase}: its worker started)"
    changed = _changed(old.to_json()["spec"], new.to_json()["spec"], "spec")
    return [(path, why) for path in changed]


def _spec_causes(old: Resource, new: Resource) -> list[tuple[str, str]]:
    if old.to_json().get("spec") != new.to_json().get("spec"):
        return [("spec", IMMUTABLE)]
    return []


def _storage_class_causes(old: StorageClass, new: StorageClass) -> list[tuple[str, str]]:
    before, after = old.to_json(), new.to_json()
    changed = [name for name in STORAGE_CLASS_FIXED if before.get(name) != after.get(name)]
    return [(name, IMMUTABLE) for name in changed]


def _class_causes(old: VirtualMachineClass, new: VirtualMachineClass) -> list[tuple[str, str]]:
    if old.spec.cpu != new.spec.cpu:
        return [("spec.cpu", f"{IMMUTABLE} (.spec.cpu is immutable, as Deckhouse keeps it)")]
    return []


def update_causes(old: Resource, new: Resource) -> list[tuple[str, str]]:
    """Each `(field path, message)` of a change from `old` to `new` that is not allowed."""
    if isinstance(old, VirtualDisk) and isinstance(new, VirtualDisk):
        return _disk_causes(old, new)
    if isinstance(old, StorageClass) and isinstance(new, StorageClass):
        return _storage_class_causes(old, new)
    if isinstance(old, VirtualMachineClass) and isinstance(new, VirtualMachineClass):
        return _class_causes(old, new)
    if isinstance(old, IMAGES) and isinstance(new, IMAGES):
        return _image_causes(old, new)
    if isinstance(old, FIXED_SPEC) and isinstance(new, FIXED_SPEC):
        return _spec_causes(old, new)
    return []


def check_update(info: KindInfo, old: Resource, new: Resource) -> None:
    """Refuse an update of `old` to `new` that changes what may not change, naming each field.

    A disk's or an image's spec may change while its work has not started (it is Pending, or
    new), as Deckhouse allows; afterwards only a disk's `spec.persistentVolumeClaim.size`
    may, to grow. A VirtualMachineClass's `spec.cpu` is fixed; the other diskferry.io kinds'
    specs are fixed at creation, as are a StorageClass's provisioner, parameters,
    reclaimPolicy and volumeBindingMode. The error is an InvalidError (422), as validation's,
    and says why.
    """
    causes = update_causes(old, new)
    if not causes:
        return
    listed = "; ".join(f"{path}: {message}" for path, message in causes)
    raise InvalidError(
        f'{info.group_kind} "{new.metadata.name or ""}" is invalid: {listed}',
        kind=info.kind,
        name=new.metadata.name,
        causes=[
            {"reason": "FieldValueInvalid", "field": path, "message": message}
            for path, message in causes
        ],
    )
