"""KubeVirt's backup points in a cluster (`host.points`): a Pull VirtualMachineBackup
(backup.kubevirt.io/v1alpha1) of a VirtualMachine through its VirtualMachineBackupTracker, as a
backup vendor makes one (KubeVirt >= 1.8, feature gate IncrementalBackup, the VM's changed-block
tracking on).

- The tracker of a VM for a chain (one per BackupStorageLocation, so that two repositories do
  not move each other's checkpoint) is `<vm>-<chain>`, made when missing; the backup goes on
  from its latest checkpoint unless asked for a full one.
- The backup `name` names the tracker, Pull, its token Secret `name` (key `token`, a random
  value made with it) and its scratch claim `name` (as big as the VM's claims together, what a
  guest rewriting everything while the point lives would need, and 1 GiB at least), both owned
  by the backup so that they go with it; it lives at most its `ttlDuration`.
- It answers once its Progressing condition says ExportReady: its endpoints are those of
  `status.links.internal` (the export's, inside the cluster), else `status.includedVolumes`
  with `status.endpointCert`; a volume of an Incremental backup shows the changes since the
  tracker's latest checkpoint, which KubeVirt moves on only once the backup ended.
- Released, the backup is deleted: KubeVirt ends the point and puts its checkpoint into the
  tracker before its finalizer lets it go.

A disk of a VM is named by its volume's claim (`persistentVolumeClaim.claimName`, or a
`dataVolume`'s claim, named as it), the name a restore makes it again under. A restored VM is
held with `runStrategy: Halted`, its own strategy (`running: true` is Always) kept in the
annotation `diskferry.io/restore-run-strategy` until it is given back, as OADP holds it.
"""

from __future__ import annotations

import base64
import math
import secrets
from datetime import timedelta
from typing import Any

from diskferry.control.errors import AlreadyExistsError, NotFoundError
from diskferry.control.host.points import HostedMachine, PointError, ServedDisk, ServedPoint
from diskferry.control.resources.duration import format_duration
from diskferry.control.resources.names import short_name
from diskferry.control.resources.quantity import format_bytes, parse_quantity
from diskferry.kube.api import KubeApi
from diskferry.kube.volumes import MANAGED

KUBEVIRT = "kubevirt.io"
BACKUP_GROUP = "backup.kubevirt.io"
BACKUP_API = f"{BACKUP_GROUP}/v1alpha1"
VM = (f"{KUBEVIRT}/v1", "VirtualMachine")
TRACKER = (BACKUP_API, "VirtualMachineBackupTracker")
BACKUP = (BACKUP_API, "VirtualMachineBackup")
SECRET = ("v1", "Secret")
PVC = ("v1", "PersistentVolumeClaim")
READY = "ExportReady"
HALTED = "Halted"
HELD = "diskferry.io/restore-run-strategy"
FROZEN = "QuiesceSucceeded"
MIN_SCRATCH = 1 << 30
Obj = dict[str, Any]


def _condition(obj: Obj, kind: str) -> Obj:
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind:
            return dict(found)
    return {}


def _claims(vm: Obj) -> dict[str, str]:
    """The claim of each of the VM's volumes that has one (a DataVolume's is named as it)."""
    spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
    found = {}
    for volume in spec.get("volumes") or []:
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName") or (
            volume.get("dataVolume") or {}
        ).get("name")
        if claim:
            found[volume["name"]] = claim
    return found


def _run_strategy(spec: Obj) -> str:
    """The VM's run strategy: `runStrategy`, else Always for `running: true`, else Halted."""
    return str(spec.get("runStrategy") or ("Always" if spec.get("running") else "Halted"))


def _endpoints(backup: Obj) -> tuple[list[Obj], str]:
    """Each volume's endpoints, and the CA to trust for them."""
    status = backup.get("status") or {}
    internal = (status.get("links") or {}).get("internal") or {}
    if internal.get("volumes"):
        return internal["volumes"], internal.get("cert") or ""
    return status.get("includedVolumes") or [], status.get("endpointCert") or ""


class KubeVirtPoints:
    """Backup points of KubeVirt's VMs, through the cluster's API."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def machines(self) -> list[HostedMachine]:
        """Every KubeVirt VM of the cluster; none where the cluster serves no KubeVirt."""
        try:
            found, _ = self.api.list(*VM)
        except NotFoundError:
            return []
        return [
            HostedMachine(
                namespace=vm["metadata"].get("namespace") or "default",
                name=vm["metadata"]["name"],
                labels=vm["metadata"].get("labels") or {},
                claims=_claims(vm),
                manifest=vm,
            )
            for vm in found
        ]

    def hold(self, namespace: str, manifest: Obj) -> str | None:
        """Make the VM of `manifest` in `namespace`, Halted, its own run strategy in the
        annotation HELD; that strategy, None when a VM of its name is there already."""
        meta = manifest.get("metadata") or {}
        if self.api.get(*VM, namespace, meta["name"]) is not None:
            return None
        spec = {k: v for k, v in (manifest.get("spec") or {}).items() if k != "running"}
        strategy = _run_strategy(manifest.get("spec") or {})
        annotations = {**(meta.get("annotations") or {}), HELD: strategy}
        body = {
            "apiVersion": VM[0],
            "kind": VM[1],
            "metadata": {
                "name": meta["name"],
                "namespace": namespace,
                "labels": meta.get("labels") or {},
                "annotations": annotations,
            },
            "spec": {**spec, "runStrategy": HALTED},
        }
        self._create(VM, namespace, body)
        return strategy

    def give_back(self, namespace: str, name: str) -> str | None:
        """Put the run strategy HELD keeps back on the VM; it, None when there is none."""
        vm = self.api.get(*VM, namespace, name)
        held = ((vm or {}).get("metadata") or {}).get("annotations", {}).get(HELD)
        if held is None:
            return None
        patch = {"metadata": {"annotations": {HELD: None}}, "spec": {"runStrategy": held}}
        self.api.patch(*VM, namespace, name, patch)
        return str(held)

    def point(
        self,
        name: str,
        namespace: str,
        vm: str,
        *,
        chain: str,
        full: bool,
        ttl: float,
    ) -> ServedPoint | str:
        """The backup `name` of `namespace/vm` (see the module), once it answers."""
        try:
            machine = self.api.get(*VM, namespace, vm)
        except NotFoundError as e:  # no kubevirt.io in the cluster
            raise PointError(
                f"{e.message}: a KubeVirt VM is backed up through KubeVirt's backup API "
                "(KubeVirt 1.8 or later)",
                reason="VirtualMachineNotFound",
            ) from e
        if machine is None:
            raise PointError(
                f"the VirtualMachine {namespace}/{vm} (kubevirt.io) does not exist",
                reason="VirtualMachineNotFound",
            )
        tracker = self._tracker(namespace, vm, chain)
        backup = self.api.get(*BACKUP, namespace, name)
        if backup is None:
            body = self._backup(name, namespace, tracker, full, ttl)
            self._create(BACKUP, namespace, body)
            return f"waiting for the VirtualMachineBackup {name} to be made"
        self._token(backup)
        self._scratch(backup, machine)
        failed = _condition(backup, "Failed")
        if failed.get("status") == "True":
            raise PointError(
                f"the VirtualMachineBackup {name} failed: {failed.get('message') or ''}".strip()
            )
        if _condition(backup, "Complete").get("status") == "True":
            raise PointError(f"the VirtualMachineBackup {name} ended before it was read")
        progressing = _condition(backup, "Progressing")
        volumes, ca = _endpoints(backup)
        if progressing.get("reason") != READY or not volumes:
            said = ": ".join(filter(None, [progressing.get("reason"), progressing.get("message")]))
            return f"waiting for the VirtualMachineBackup {name} to be served" + (
                f" ({said})" if said else ""
            )
        return self._served(backup, volumes, ca, tracker, _claims(machine))

    def _tracker(self, namespace: str, vm: str, chain: str) -> Obj:
        """The VM's tracker for `chain`, made when missing."""
        name = short_name(vm, chain)
        found = self.api.get(*TRACKER, namespace, name)
        if found is not None:
            return found
        body = {
            "apiVersion": BACKUP_API,
            "kind": TRACKER[1],
            "metadata": {"name": name, "namespace": namespace, "labels": MANAGED},
            "spec": {"source": {"apiGroup": KUBEVIRT, "kind": VM[1], "name": vm}},
        }
        return self._create(TRACKER, namespace, body)

    def _backup(self, name: str, namespace: str, tracker: Obj, full: bool, ttl: float) -> Obj:
        source = {
            "apiGroup": BACKUP_GROUP,
            "kind": TRACKER[1],
            "name": tracker["metadata"]["name"],
        }
        spec: Obj = {
            "source": source,
            "mode": "Pull",
            "pvcName": name,
            "tokenSecretRef": name,
            "ttlDuration": format_duration(timedelta(seconds=math.ceil(ttl))),
        }
        if full:
            spec["forceFullBackup"] = True
        return {
            "apiVersion": BACKUP_API,
            "kind": BACKUP[1],
            "metadata": {"name": name, "namespace": namespace, "labels": MANAGED},
            "spec": spec,
        }

    def _owned(self, backup: Obj, api_version: str, kind: str) -> Obj:
        """A new object of `kind` named as the backup, owned by it."""
        meta = backup["metadata"]
        owner = {
            "apiVersion": BACKUP_API,
            "kind": BACKUP[1],
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        return {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": MANAGED,
                "ownerReferences": [owner],
            },
        }

    def _token(self, backup: Obj) -> bytes:
        """The backup's token, from its Secret (made with a random one when missing)."""
        meta = backup["metadata"]
        found = self.api.get(*SECRET, meta["namespace"], meta["name"])
        if found is None:
            made = base64.b64encode(secrets.token_urlsafe(32).encode()).decode()
            body = {**self._owned(backup, *SECRET), "type": "Opaque", "data": {"token": made}}
            found = self._create(SECRET, meta["namespace"], body)
        return base64.b64decode((found.get("data") or {}).get("token") or "")

    def _scratch(self, backup: Obj, machine: Obj) -> None:
        """The backup's scratch claim, made when missing."""
        meta = backup["metadata"]
        if self.api.get(*PVC, meta["namespace"], meta["name"]) is not None:
            return
        size = 0
        for claim in _claims(machine).values():
            pvc = self.api.get(*PVC, meta["namespace"], claim) or {}
            asked = ((pvc.get("spec") or {}).get("resources") or {}).get("requests") or {}
            size += parse_quantity(str(asked.get("storage") or 0))
        spec = {
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "resources": {"requests": {"storage": format_bytes(max(size, MIN_SCRATCH))}},
        }
        self._create(PVC, meta["namespace"], {**self._owned(backup, *PVC), "spec": spec})

    def _served(
        self, backup: Obj, volumes: list[Obj], ca: str, tracker: Obj, claims: dict[str, str]
    ) -> ServedPoint:
        """The point of `backup`, each volume named by its claim."""
        meta, status = backup["metadata"], backup.get("status") or {}
        latest = ((tracker.get("status") or {}).get("latestCheckpoint") or {}).get("name")
        disks = [
            ServedDisk(
                name=claims[volume["volumeName"]],
                data=volume["dataEndpoint"],
                map=volume["mapEndpoint"],
                since=latest if self._incremental(status, volume) else None,
            )
            for volume in volumes
            if volume["volumeName"] in claims
        ]
        frozen = _condition(backup, "Quiesced").get("reason") == FROZEN
        return ServedPoint(
            name=f"VirtualMachineBackup {meta['namespace']}/{meta['name']}",
            disks=disks,
            token=self._token(backup),
            ca=ca.encode(),
            checkpoint=status.get("checkpointName"),
            consistency="filesystems frozen" if frozen else "crash-consistent",
        )

    def _incremental(self, status: Obj, volume: Obj) -> bool:
        """Whether the volume's map shows changes: its type, else the backup's."""
        for included in status.get("includedVolumes") or []:
            if included.get("volumeName") == volume["volumeName"] and included.get("type"):
                return bool(included["type"] == "Incremental")
        return bool(status.get("type") == "Incremental")

    def _create(self, what: tuple[str, str], namespace: str, body: Obj) -> Obj:
        """Create `body`, or take the one of its name another call made first."""
        try:
            return self.api.create(*what, namespace, body)
        except AlreadyExistsError:
            found = self.api.get(*what, namespace, body["metadata"]["name"])
            if found is None:
                raise
            return found

    def release(self, name: str, namespace: str) -> bool:
        """Delete the backup `name` (its token Secret and scratch claim go with it); whether it
        is gone."""
        found = self.api.get(*BACKUP, namespace, name)
        if found is None:
            return True
        if not found["metadata"].get("deletionTimestamp"):
            self.api.delete(*BACKUP, namespace, name)
        return False
