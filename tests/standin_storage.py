"""The stand-in cluster's storage: a provisioner and the binder of claims to volumes, as a CSI
provisioner and kube-controller-manager's persistent volume controller do in a cluster.

- A PersistentVolumeClaim of a StorageClass that the stand-in serves, with no volume yet, gets a
  PersistentVolume `pvc-<claim uid>` backed by a directory (Filesystem) or a sparse file of the
  claim's size (Block) under DATA_DIR/storage, its `claimRef` naming the claim. A claim whose
  `dataSourceRef` names a kind other than a claim or a snapshot is left to its populator, as
  the external provisioner leaves it.
- A volume is usable on every node, unless its class is bound WaitForFirstConsumer, when it is
  provisioned only once the scheduler has written the node of the claim's first Pod on it
  (`volume.kubernetes.io/selected-node`) and is usable there alone, or its class names
  `allowedTopologies` of `kubernetes.io/hostname`, when it is usable on the first node they
  name (its `nodeAffinity` says so, as a local volume's does).
- A claim without a volume that a volume's `claimRef` names (by uid) is bound to it: its
  `spec.volumeName` set, Bound with the volume's capacity. That is how a populator hands the
  volume it filled (its prime claim's) to the claim it populates: it moves the volume's claimRef.
- A claim bound to a volume whose claimRef names another claim is Lost.
- A bound claim whose request grows past its volume's capacity is expanded, as a CSI driver's
  resizer and the kubelet expand one, where its class sets `allowVolumeExpansion: true`: the
  backing file of a Block volume grown (and any loop device over it told), the volume's
  capacity and then the claim's `status.capacity` set to the request. Another class's claim
  keeps its capacity.
- A volume whose claim is gone (read again, never off a listing) is Released; with the Delete
  reclaim policy its backing and the volume are removed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from standin_loop import Loop, kind

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import ApiError, NotFoundError
from diskferry.control.resources.quantity import parse_quantity

log = logging.getLogger("standin.storage")
MERGE = "application/merge-patch+json"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
PROVISIONER = "diskferry.io/standin"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
HOSTNAME = "kubernetes.io/hostname"
CORE_SOURCES = {("", "PersistentVolumeClaim"), ("snapshot.storage.k8s.io", "VolumeSnapshot")}
Obj = dict[str, Any]


def backing(pv: Obj) -> Path | None:
    """The directory or file a stand-in volume keeps its bytes in, None for another's."""
    path = ((pv.get("spec") or {}).get("hostPath") or {}).get("path")
    return Path(path) if path else None


def block(obj: Obj) -> bool:
    """Whether a claim or a volume is of volumeMode Block."""
    return (obj.get("spec") or {}).get("volumeMode") == "Block"


def wait_for_consumer(storage_class: Obj) -> bool:
    """Whether the class's claims get their volume only once a Pod that uses them is
    scheduled."""
    return storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"


def _node(pvc: Obj, storage_class: Obj) -> str | None:
    """The node the claim's volume is usable on alone, None for every node (or, for a class
    that waits for a claim's first consumer, while no node was chosen)."""
    selected = (pvc["metadata"].get("annotations") or {}).get(SELECTED_NODE)
    if selected or wait_for_consumer(storage_class):
        return str(selected) if selected else None
    for term in storage_class.get("allowedTopologies") or []:
        for expression in term.get("matchLabelExpressions") or []:
            if expression.get("key") == HOSTNAME and expression.get("values"):
                return str(expression["values"][0])
    return None


def _node_affinity(node: str) -> Obj:
    """The nodeAffinity of a volume usable on `node` alone."""
    expression = {"key": HOSTNAME, "operator": "In", "values": [node]}
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}}


def _populated_elsewhere(pvc: Obj) -> bool:
    """Whether the claim's dataSourceRef names a populator's kind."""
    ref = (pvc.get("spec") or {}).get("dataSourceRef")
    return bool(ref) and (ref.get("apiGroup") or "", ref.get("kind")) not in CORE_SOURCES


def _loops_told(path: Path) -> None:
    """Tell each loop device over `path` its file's new size."""
    found = subprocess.run(
        ["losetup", "--associated", str(path), "--noheadings", "-O", "NAME"],
        capture_output=True,
        text=True,
        check=False,
    )
    for loop in found.stdout.split():
        subprocess.run(["losetup", "--set-capacity", loop], capture_output=True, check=False)


class Storage:
    """Provisions volumes for claims and binds them, in DATA_DIR/storage."""

    def __init__(self, service: ObjectService, data_dir: Path) -> None:
        self.service = service
        self.root = data_dir / "storage"
        self.root.mkdir(mode=0o700, exist_ok=True)
        self.claims = kind(service, "PersistentVolumeClaim")
        self.volumes = kind(service, "PersistentVolume")
        self.classes = kind(service, "StorageClass", "storage.k8s.io")
        self.loop = Loop(service, "standin-storage", self.sync)

    def start(self) -> None:
        """Begin provisioning and binding."""
        self.loop.start()

    def stop(self) -> None:
        """Stop (volumes and their backing stay)."""
        self.loop.stop()

    def sync(self) -> None:
        """One step for every claim and volume."""
        pvs = self.service.list(self.volumes, None).items
        pvcs = self.service.list(self.claims, None).items
        by_name = {pv["metadata"]["name"]: pv for pv in pvs}
        by_claim = {
            pv["spec"]["claimRef"]["uid"]: pv
            for pv in pvs
            if (pv["spec"].get("claimRef") or {}).get("uid")
        }
        for pvc in pvcs:
            try:
                self._claim(pvc, by_name, by_claim)
            except ApiError as e:  # changed meanwhile: the next sync takes it as it is then
                log.info("claim %s: %s", pvc["metadata"]["name"], e.message)
        for pv in pvs:
            try:
                self._volume(pv)
            except ApiError as e:
                log.info("volume %s: %s", pv["metadata"]["name"], e.message)

    def _claim(self, pvc: Obj, by_name: dict[str, Obj], by_claim: dict[str, Obj]) -> None:
        meta, spec = pvc["metadata"], pvc["spec"]
        if meta.get("deletionTimestamp"):
            return
        name = spec.get("volumeName")
        if name:
            pv = by_name.get(name)
            if pv is None or (pv["spec"].get("claimRef") or {}).get("uid") != meta["uid"]:
                self._phase(self.claims, pvc, "Lost")
            elif (pvc.get("status") or {}).get("phase") != "Bound":
                self._bind(pvc, pv)
            else:
                self._expand(pvc, pv)
            return
        pv = by_claim.get(meta["uid"])
        if pv is not None:
            self._bind(pvc, pv)
        elif not _populated_elsewhere(pvc):
            self._provision(pvc)

    def _provision(self, pvc: Obj) -> None:
        meta, spec = pvc["metadata"], pvc["spec"]
        class_name = spec.get("storageClassName")
        try:
            storage_class = self.service.get(self.classes, None, class_name or "")
        except NotFoundError:
            return  # no class of this name (yet): nothing provisions it
        node = _node(pvc, storage_class)
        if wait_for_consumer(storage_class) and node is None:
            return  # until the scheduler places a Pod that uses it
        capacity = spec["resources"]["requests"]["storage"]
        name = f"pvc-{meta['uid']}"
        path = self.root / name
        if block(pvc):
            path = path.with_suffix(".img")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, parse_quantity(str(capacity)))
            finally:
                os.close(fd)
        else:
            path.mkdir(mode=0o700, exist_ok=True)
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {
                "capacity": {"storage": capacity},
                "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "volumeMode": spec.get("volumeMode") or "Filesystem",
                "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
                "storageClassName": class_name,
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "hostPath": {"path": str(path), "type": "File" if block(pvc) else "Directory"},
            },
        }
        if node is not None:
            pv["spec"]["nodeAffinity"] = _node_affinity(node)
        self.service.create(self.volumes, None, pv)
        where = f" on {node}" if node else ""
        log.info("provisioned %s%s for %s/%s", name, where, meta["namespace"], meta["name"])

    def _bind(self, pvc: Obj, pv: Obj) -> None:
        meta = pvc["metadata"]
        if not pvc["spec"].get("volumeName"):
            bound = {**pvc, "spec": {**pvc["spec"], "volumeName": pv["metadata"]["name"]}}
            self.service.update(self.claims, meta["namespace"], meta["name"], bound)
        status = {
            "phase": "Bound",
            "accessModes": pv["spec"].get("accessModes"),
            "capacity": pv["spec"]["capacity"],
        }
        self.service.patch(
            self.claims,
            meta["namespace"],
            meta["name"],
            {"status": status},
            MERGE,
            subresource="status",
        )
        self._phase(self.volumes, pv, "Bound")
        log.info("bound %s/%s to %s", meta["namespace"], meta["name"], pv["metadata"]["name"])

    def _expand(self, pvc: Obj, pv: Obj) -> None:
        """Grow the claim's volume to its request, where its class allows it."""
        asked = pvc["spec"]["resources"]["requests"]["storage"]
        if parse_quantity(str(asked)) <= parse_quantity(str(pv["spec"]["capacity"]["storage"])):
            return
        try:
            storage_class = self.service.get(self.classes, None, pvc["spec"]["storageClassName"])
        except NotFoundError:
            return
        if storage_class.get("allowVolumeExpansion") is not True:
            return
        path = backing(pv)
        if block(pv) and path is not None and path.is_relative_to(self.root):
            fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                os.ftruncate(fd, max(os.fstat(fd).st_size, parse_quantity(str(asked))))
            finally:
                os.close(fd)
            _loops_told(path)
        name = pv["metadata"]["name"]
        grown = {"spec": {"capacity": {"storage": asked}}}
        self.service.patch(self.volumes, None, name, grown, MERGE)
        meta = pvc["metadata"]
        status = {"status": {"capacity": {"storage": asked}}}
        self.service.patch(
            self.claims, meta["namespace"], meta["name"], status, MERGE, subresource="status"
        )
        log.info("expanded %s/%s (%s) to %s", meta["namespace"], meta["name"], name, asked)

    def _phase(self, info: Any, obj: Obj, phase: str) -> None:
        if (obj.get("status") or {}).get("phase") == phase:
            return
        meta = obj["metadata"]
        self.service.patch(
            info,
            meta.get("namespace"),
            meta["name"],
            {"status": {"phase": phase}},
            MERGE,
            subresource="status",
        )

    def _claim_gone(self, pv: Obj) -> bool:
        """Whether the claim the volume's claimRef names is gone, read again now: its claimRef
        may have moved to another claim since the listing."""
        ref = self.service.get(self.volumes, None, pv["metadata"]["name"])["spec"].get("claimRef")
        if not ref:
            return False
        try:
            found = self.service.get(self.claims, ref.get("namespace"), ref.get("name") or "")
        except NotFoundError:
            return True
        return found["metadata"]["uid"] != ref.get("uid")

    def _volume(self, pv: Obj) -> None:
        if (pv.get("status") or {}).get("phase") == "Released" or not self._claim_gone(pv):
            return
        name = pv["metadata"]["name"]
        if pv["spec"].get("persistentVolumeReclaimPolicy") != "Delete":
            self._phase(self.volumes, pv, "Released")
            return
        path = backing(pv)
        if path is not None and path.is_relative_to(self.root):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        self.service.delete(self.volumes, None, name)
        log.info("deleted %s: its claim is gone", name)
