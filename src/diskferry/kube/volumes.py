"""The claims of the StorageClasses in a cluster (`host.volumes`): each claim a PVC, populated
through a prime PVC as CDI's volume populators populate theirs.

- Made (`claim`), a claim is its target PVC, of its class and size, whose `dataSourceRef` names
  the disk, image or snapshot it holds (so no provisioner fills it: it waits for its
  populator), owned by that object; beside it a prime PVC `prime-<target's uid>`, the same but
  for its source, owned by the target, that the storage provisions at once.
- While the target has no volume, the workers write the prime (`mount`): the folder of a
  Filesystem claim holding `disk.img`, or the device of a Block claim (see `claims`).
- Sealed once written (`seal`), the prime's volume is handed to the target: its claimRef made
  the target's, which the cluster binds it to. The prime, now bound to nothing, is removed
  once the target is bound.
- A claim of no disk, image or snapshot (a KubeVirt VM's, restored under its own name) is a
  PVC the storage provisions at once, owned by nothing and with no prime: a worker writes it
  once it is bound (`writable`).
- A claim is of its class's volume mode and access mode (see
  `control.reconcilers.disks.claimmodes`: Block and ReadWriteMany for a Ceph RBD class, as
  Deckhouse asks for them); a class bound WaitForFirstConsumer gets its volume where the
  worker Pod that first mounts the prime is scheduled.
- A Filesystem claim asks for its disk's size and the filesystem's room besides
  (FILESYSTEM_OVERHEAD, CDI's default); a Block claim for its disk's size. The disk's size is
  kept in an annotation, since the claim's capacity is the storage's to round.
- A claim grows (`expand`) as Deckhouse's disks do: its target's request is raised, where its
  StorageClass sets `allowVolumeExpansion: true` (ExpansionRefusedError otherwise), and the
  storage has expanded it once its `status.capacity` reaches the request; a worker then grows
  the disk file of a Filesystem claim (a Block claim's volume is its disk). The annotation
  takes the disk's new size once it was grown (`resized`), so a claim whose annotation says
  less is grown again: the request and a file already as large are left as they are.

Nothing here reads or writes a claim's bytes: the worker Pods do.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from diskferry.control.errors import AlreadyExistsError, ConflictError
from diskferry.control.host.volumes import (
    Claim,
    Expansion,
    ExpansionRefusedError,
    VolumeClass,
    VolumeError,
)
from diskferry.control.resources.quantity import format_bytes, parse_quantity
from diskferry.kube.api import KubeApi
from diskferry.kube.claims import claim_path, owner
from diskferry.kube.pods import Mount

PVC = ("v1", "PersistentVolumeClaim")
PV = ("v1", "PersistentVolume")
STORAGE_CLASS = ("storage.k8s.io/v1", "StorageClass")
SIZE_ANNOTATION = "diskferry.io/disk-size"
FILESYSTEM_OVERHEAD = 0.055
"""The share of a Filesystem claim its filesystem takes for itself (CDI's default)."""
ROUNDING = 1 << 20
MANAGED = {"app.kubernetes.io/managed-by": "diskferry-operator"}
BINDER_ANNOTATIONS = ("pv.kubernetes.io/bind-completed", "pv.kubernetes.io/bound-by-controller")
Obj = dict[str, Any]


def prime_name(target: Obj) -> str:
    """The name of the prime PVC of the target PVC `target`."""
    return f"prime-{target['metadata']['uid']}"


def requested(size: int, block: bool) -> int:
    """The bytes a claim asks for to hold a disk of `size` bytes."""
    if block:
        return size
    return math.ceil(size * (1 + FILESYSTEM_OVERHEAD) / ROUNDING) * ROUNDING


def _storage(quantities: Obj | None) -> int:
    """The bytes of the `storage` quantity of a PVC's requests or capacity, 0 without one."""
    return parse_quantity(str((quantities or {}).get("storage") or 0))


def _resize_conditions(pvc: Obj) -> str:
    """What the PVC's conditions say of its resize (Resizing, FileSystemResizePending, a
    resize error), as `; TYPE: message` each."""
    said = [
        f"; {c.get('type')}: {c.get('message') or c.get('reason') or c.get('status')}"
        for c in (pvc.get("status") or {}).get("conditions") or []
        if "Resiz" in str(c.get("type"))
    ]
    return "".join(said)


def _bound(pvc: Obj | None) -> bool:
    return bool(pvc) and (pvc.get("status") or {}).get("phase") == "Bound"  # type: ignore[union-attr]


@dataclass(frozen=True)
class PvcClaim:
    """One claim: its PVC, and the path workers write of it in their Pods."""

    volume_class: VolumeClass
    namespace: str
    name: str
    file: Path
    path: str
    block: bool
    ready: bool
    disk_size: int

    def allocated(self) -> int:
        """The bytes the claim takes on its storage, as far as the cluster says: its disk's."""
        return self.disk_size

    def size(self) -> int:
        """The bytes of the claim's disk."""
        return self.disk_size


class ClusterVolumes:
    """Makes, finds, hands over and removes claims as PVCs through `api`."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def block_unavailable(self) -> str | None:
        """None: a cluster's storage offers Block claims (volumeMode Block)."""
        return None

    def sized_claims(self) -> bool:
        """True: a PVC is asked for with its size."""
        return True

    def _get(self, namespace: str, name: str) -> Obj | None:
        return self.api.get(*PVC, namespace, name)

    def _claim(self, volume_class: VolumeClass, target: Obj) -> PvcClaim:
        """The claim of the target PVC `target`, its prime removed once it is bound."""
        meta = target["metadata"]
        block = target["spec"].get("volumeMode") == "Block"
        path = claim_path(meta["namespace"], meta["name"], block)
        ready = _bound(target)
        if ready:
            self.api.delete(*PVC, meta["namespace"], prime_name(target))
        else:
            ready = self._handed_over(target)
        size = int((meta.get("annotations") or {}).get(SIZE_ANNOTATION) or 0)
        return PvcClaim(
            volume_class, meta["namespace"], meta["name"], Path(path), path, block, ready, size
        )

    def _handed_over(self, target: Obj) -> bool:
        """Whether the prime's volume was handed to the target, which the cluster binds soon."""
        prime = self._get(target["metadata"]["namespace"], prime_name(target))
        name = (prime or {}).get("spec", {}).get("volumeName")
        pv = self.api.get(*PV, None, name) if name else None
        claim_ref = ((pv or {}).get("spec") or {}).get("claimRef") or {}
        return claim_ref.get("uid") == target["metadata"]["uid"]

    def _spec(self, volume_class: VolumeClass, size: int) -> Obj:
        mode = "Block" if volume_class.block else "Filesystem"
        return {
            "storageClassName": volume_class.name,
            "volumeMode": mode,
            "accessModes": [volume_class.access_mode],
            "resources": {"requests": {"storage": str(requested(size, volume_class.block))}},
        }

    def _make_target(self, volume_class: VolumeClass, namespace: str, name: str, size: int) -> Obj:
        """The target PVC: populated through its prime when it is the claim of a disk, an image
        or a snapshot (which owns it), provisioned as any claim otherwise (a KubeVirt VM's,
        restored)."""
        body: Obj = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": MANAGED,
                "annotations": {SIZE_ANNOTATION: str(size)},
            },
            "spec": self._spec(volume_class, size),
        }
        ref = owner(name)
        if ref is not None:
            body["metadata"]["ownerReferences"] = [ref]
            body["spec"]["dataSourceRef"] = {
                "apiGroup": ref["apiVersion"].split("/")[0],
                "kind": ref["kind"],
                "name": ref["name"],
            }
        try:
            return self.api.create(*PVC, namespace, body)
        except AlreadyExistsError:
            return self._get(namespace, name) or body

    def _make_prime(self, volume_class: VolumeClass, target: Obj) -> None:
        meta = target["metadata"]
        size = int(meta["annotations"][SIZE_ANNOTATION])
        body = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": prime_name(target),
                "namespace": meta["namespace"],
                "labels": MANAGED,
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": self._spec(volume_class, size),
        }
        with contextlib.suppress(AlreadyExistsError):
            self.api.create(*PVC, meta["namespace"], body)

    def claim(self, volume_class: VolumeClass, namespace: str, name: str, size: int) -> PvcClaim:
        """Make the claim of `size` bytes (its target, and its prime while it is not bound), or
        find it made; VolumeError without a size: a PVC is asked for with one."""
        target = self._get(namespace, name)
        if target is None:
            if size <= 0:
                raise VolumeError(
                    f"the claim {name} needs a size in a cluster: give persistentVolumeClaim.size"
                )
            target = self._make_target(volume_class, namespace, name, size)
        claim = self._claim(volume_class, target)
        if not claim.ready and owner(name) is not None:
            self._make_prime(volume_class, target)
        return claim

    def find(self, volume_class: VolumeClass, namespace: str, name: str) -> PvcClaim | None:
        """The claim when it was made in `volume_class`."""
        target = self._get(namespace, name)
        if target is None or target["spec"].get("storageClassName") != volume_class.name:
            return None
        return self._claim(volume_class, target)

    def locate(self, classes: Iterable[VolumeClass], namespace: str, name: str) -> PvcClaim | None:
        """The claim `name` in whichever of `classes` holds it, None when none does."""
        target = self._get(namespace, name)
        if target is None:
            return None
        wanted = target["spec"].get("storageClassName")
        found = next((c for c in classes if c.name == wanted), None)
        return None if found is None else self._claim(found, target)

    def mount(self, namespace: str, claim: str) -> Mount | None:
        """The PVC a Pod mounts for the claim: its target once bound, else its prime."""
        target = self._get(namespace, claim)
        if target is None:
            return None
        block = target["spec"].get("volumeMode") == "Block"
        if target["spec"].get("volumeName"):
            return Mount(namespace, claim, claim, block)
        prime = self._get(namespace, prime_name(target))
        return None if prime is None else Mount(namespace, claim, prime_name(target), block)

    def seal(self, claim: Claim) -> None:
        """Hand the volume the workers wrote (the prime's) to the claim's target; VolumeError
        while the prime is not bound to one yet."""
        target = self._get(claim.namespace, claim.name)
        if target is None:
            raise VolumeError(f"the claim {claim.namespace}/{claim.name} is gone")
        if target["spec"].get("volumeName"):
            return
        prime = self._get(claim.namespace, prime_name(target))
        volume = (prime or {}).get("spec", {}).get("volumeName")
        if not _bound(prime) or not volume:
            raise VolumeError(f"the prime claim {prime_name(target)} has no volume yet")
        pv = self.api.get(*PV, None, volume)
        if pv is None:
            raise VolumeError(f"the volume {volume} of {prime_name(target)} is gone")
        ref = pv["spec"].get("claimRef") or {}
        meta = target["metadata"]
        if ref.get("uid") == meta["uid"]:
            return
        pv["spec"]["claimRef"] = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
        }
        annotations = pv["metadata"].get("annotations") or {}
        for said in BINDER_ANNOTATIONS:  # the binder's, about the prime
            annotations.pop(said, None)
        pv["metadata"]["annotations"] = annotations
        try:
            self.api.replace(*PV, None, volume, pv)
        except ConflictError as e:
            raise VolumeError(f"the volume {volume} changed while handed over: {e}") from None

    def expand(self, claim: Claim, size: int) -> Expansion:
        """Raise the request of the claim's target to hold a disk of `size` bytes, refused
        (ExpansionRefusedError) where its class does not allow volume expansion; done once its
        capacity holds it."""
        target = self._get(claim.namespace, claim.name)
        if target is None:
            raise VolumeError(f"the claim {claim.namespace}/{claim.name} is gone")
        block = target["spec"].get("volumeMode") == "Block"
        wanted = requested(size, block)
        capacity = _storage((target.get("status") or {}).get("capacity"))
        if capacity >= wanted:
            return Expansion(done=True, grows_disk=not block)
        if _storage(target["spec"].get("resources", {}).get("requests")) < wanted:
            self._expandable(target)
            patch = {"spec": {"resources": {"requests": {"storage": str(wanted)}}}}
            target = self.api.patch(*PVC, claim.namespace, claim.name, patch)
        message = (
            f"waiting for the storage to expand the claim {claim.name} to "
            f"{format_bytes(wanted)} (it has {format_bytes(capacity)}"
            f"{_resize_conditions(target)})"
        )
        return Expansion(done=False, grows_disk=not block, message=message)

    def _expandable(self, target: Obj) -> None:
        """ExpansionRefusedError unless the target's StorageClass sets allowVolumeExpansion."""
        name = target["spec"].get("storageClassName") or ""
        found = self.api.get(*STORAGE_CLASS, None, name) if name else None
        if (found or {}).get("allowVolumeExpansion") is not True:
            raise ExpansionRefusedError(
                f"the StorageClass {name or '(none)'} of the claim {target['metadata']['name']} "
                "does not allow volume expansion: a class with allowVolumeExpansion: true can "
                "grow its claims"
            )

    def resized(self, claim: Claim, size: int) -> None:
        """Record the disk's new size in its target's annotation."""
        patch = {"metadata": {"annotations": {SIZE_ANNOTATION: str(size)}}}
        self.api.patch(*PVC, claim.namespace, claim.name, patch)

    def remove(self, volume_class: VolumeClass, namespace: str, name: str) -> None:
        """Remove the claim's target and prime (the storage then reclaims their volume)."""
        target = self._get(namespace, name)
        if target is None:
            return
        self.api.delete(*PVC, namespace, prime_name(target))
        self.api.delete(*PVC, namespace, name)

    def writable(self, claim: Claim) -> bool:
        """Whether a volume backs the claim's PVC, or its prime's, for a worker Pod to mount."""
        return self.mount(claim.namespace, claim.name) is not None

    def instant_copies(self, claim: Claim) -> bool:
        """False: a claim is copied by a worker, never cloned at an instant here."""
        return False

    def shared_host(self) -> bool:
        """False: a claim is reached from the node its volume is attached to, which the Pod
        that writes another claim may not be on."""
        return False

    def tracked(self, claim: Claim) -> bool:
        """False: claims in a cluster have no changed-block-tracking overlay here."""
        return False
