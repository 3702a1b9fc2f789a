"""Backup: the VMs of the included namespaces that the label selector picks, one DataUpload
each (in the Backup's namespace, labelled `diskferry.io/backup-name`, owned by the Backup);
the volume policy says which of each VM's block devices go, and `status.volumes` lists every
one with what happened to it (a VM one of whose VirtualDisks does not exist gets no DataUpload,
and fails). Once every upload ended, the manifests of the VMs backed up,
their VirtualDisks and the repository's tracker of each go into the repository as the
Backup's metadata; then Completed, PartiallyFailed (some VMs failed) or Failed (all did).
A stopped VM is backed up as a running one is (the engine opens its disks itself).

A Backup with a `ttl` is deleted once it ended and its expiration passed; such a Backup is
held by a finalizer until its snapshots are forgotten, its metadata removed and the
repository pruned, so that deleting it leaves none of its data and touches no other's."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from diskferry.backup.errors import LockedError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.duration import parse_duration
from diskferry.control.model import API_VERSION, ObjectMeta, OwnerReference, Resource
from diskferry.control.names import short_name
from diskferry.control.reconcilers.backupdata import (
    backup_snapshots,
    forget,
    freed_text,
    prune_location,
)
from diskferry.control.reconcilers.backupmeta import (
    clean_manifest,
    metadata_name,
    store_document,
    tracker_state,
)
from diskferry.control.reconcilers.bsl import available
from diskferry.control.reconcilers.dataupload import repository_vm
from diskferry.control.reconcilers.lifecycle import FINALIZER, deleting, held, release
from diskferry.control.reconcilers.location import location_of
from diskferry.control.reconcilers.volumepolicy import decide
from diskferry.control.resources.backup import BACKUP_NAME, BACKUPS, Backup, BackupPhase
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.datamover import ENDED
from diskferry.control.resources.dataupload import DISKS, VM_NAME, DataUpload
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import ClusterVirtualImage, VirtualImage
from diskferry.control.resources.virtualmachine import BlockDeviceKind, VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result
from diskferry.disk.errors import DiskferryError

POLL_SECONDS = 1.0
EXPIRY_POLL_SECONDS = 300.0
LOCKED_RETRY_SECONDS = 5.0
ENDED_PHASES = (BackupPhase.COMPLETED, BackupPhase.PARTIALLY_FAILED, BackupPhase.FAILED)
DEVICE_MODELS: dict[BlockDeviceKind, type[Resource]] = {
    BlockDeviceKind.VIRTUAL_DISK: VirtualDisk,
    BlockDeviceKind.VIRTUAL_IMAGE: VirtualImage,
    BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE: ClusterVirtualImage,
}


def upload_name(backup: Backup, namespace: str, vm: str) -> str:
    """The DataUpload of `vm`: the backup's name and the VM's (its namespace when another),
    cut to a label's length."""
    if namespace == backup.metadata.namespace:
        return short_name(backup.metadata.name or "", vm)
    return short_name(backup.metadata.name or "", namespace, vm)


class BackupReconciler:
    """Runs each Backup through its DataUploads."""

    info = BACKUPS

    def __init__(self, client: Client, clock: Clock | None = None) -> None:
        self.client = client
        self.clock = clock or Clock()

    def reconcile(self, obj: Backup) -> Result:
        """One step of the backup."""
        phase = obj.status.phase
        if deleting(obj):
            return self._drop_data(obj)
        if phase in ENDED_PHASES:
            return self._expire(obj)
        if phase is None or phase == BackupPhase.NEW:
            return self._start(obj)
        return self._follow(obj)

    def _selected(self, obj: Backup) -> list[VirtualMachine]:
        wanted = [n for n in obj.spec.included_namespaces if n != "*"]
        selector = obj.spec.label_selector
        chosen = []
        for vm in self.client.list(VirtualMachine):
            if wanted and vm.metadata.namespace not in wanted:
                continue
            if selector is not None and not selector.matches(vm.metadata.labels):
                continue
            chosen.append(vm)
        return sorted(chosen, key=lambda v: (v.metadata.namespace or "", v.metadata.name or ""))

    def _start(self, obj: Backup) -> Result:
        bsl = self.client.get(
            BackupStorageLocation, obj.metadata.namespace, obj.spec.storage_location
        )
        if not available(bsl):
            message = (
                f"waiting for the BackupStorageLocation {obj.spec.storage_location} to be Available"
            )
            if obj.status.message != message:
                self.client.patch_status(obj, {"phase": BackupPhase.NEW.value, "message": message})
            return Result.requeue(2.0)
        volumes: list[dict[str, Any]] = []
        vms = self._selected(obj)
        for vm in vms:
            namespace, name = vm.metadata.namespace or "default", vm.metadata.name or ""
            moved: list[str] = []
            missing: list[str] = []
            for ref in vm.spec.block_device_refs:
                kind = ref.kind.value
                cluster_wide = ref.kind is BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE
                target_ns = None if cluster_wide else namespace
                found = self.client.get(DEVICE_MODELS[ref.kind], target_ns, ref.name)
                plain = None if found is None else found.to_json()
                decision = decide(obj.spec.volume_policy, kind, plain)
                entry = {
                    "virtualMachine": name,
                    "namespace": namespace,
                    "kind": kind,
                    "name": ref.name,
                    "action": decision.action,
                    "phase": "Pending" if decision.action == "backup" else "Skipped",
                    "reason": decision.reason,
                }
                if decision.action == "backup" and found is None:
                    entry["phase"] = "Failed"
                    entry["reason"] = f"the {kind} {namespace}/{ref.name} does not exist"
                    missing.append(ref.name)
                elif decision.action == "backup":
                    entry["dataUpload"] = upload_name(obj, namespace, name)
                    moved.append(ref.name)
                volumes.append(entry)
            if missing:
                self._not_moved(volumes, namespace, name, missing)
            elif moved:
                self._upload(obj, namespace, name, moved)
        now = self.clock.now()
        status: dict[str, Any] = {
            "phase": BackupPhase.IN_PROGRESS.value,
            "message": f"backing up {len(vms)} VirtualMachines",
            "startTimestamp": rfc3339(now),
            "volumes": volumes,
            "progress": {"totalItems": len(vms), "itemsBackedUp": 0, "itemsFailed": 0},
            "observedGeneration": obj.metadata.generation,
        }
        if obj.spec.ttl:
            status["expiration"] = rfc3339(
                now + timedelta(seconds=parse_duration(obj.spec.ttl).total_seconds())
            )
            obj = held(self.client, obj)
        obj = self.client.patch_status(obj, status)
        for entry in volumes:
            if entry["action"] == "skip":
                vm = f"{entry['namespace']}/{entry['virtualMachine']}"
                where = f"{entry['kind']} {entry['name']} of VirtualMachine {vm}"
                self.client.event(obj, "Normal", "VolumeSkipped", f"{where}: {entry['reason']}")
        self.client.event(obj, "Normal", "InProgress", status["message"])
        return Result.requeue(POLL_SECONDS)

    def _expire(self, obj: Backup) -> Result:
        """Delete the ended Backup once its expiration passed; else look again by then."""
        if obj.status.expiration is None:
            return Result.done()
        expires = datetime.fromisoformat(obj.status.expiration)
        left = (expires - self.clock.now()).total_seconds()
        if left > 0:
            return Result.requeue(min(left, EXPIRY_POLL_SECONDS))
        self.client.event(
            obj,
            "Normal",
            "Expired",
            f"the ttl {obj.spec.ttl} ran out at {obj.status.expiration}: deleting the Backup",
        )
        self.client.delete(Backup, obj.metadata.namespace, obj.metadata.name or "")
        return Result.done()

    def _drop_data(self, obj: Backup) -> Result:
        """Stop the deleted Backup's running DataUploads, forget its snapshots and metadata,
        prune, then let it go."""
        if FINALIZER not in obj.metadata.finalizers:
            return Result.done()
        namespace, name = obj.metadata.namespace or "default", obj.metadata.name or ""
        bsl = self.client.get(BackupStorageLocation, namespace, obj.spec.storage_location)
        if bsl is None:
            self.client.event(
                obj,
                "Warning",
                "DataKept",
                f"the BackupStorageLocation {obj.spec.storage_location} is gone:"
                " the Backup's snapshots stay in its repository",
            )
            release(self.client, obj)
            return Result.done()
        uploads = self._uploads(obj)
        running = [u for u in uploads if u.status.phase not in ENDED]
        for upload in running:
            self.client.delete(DataUpload, upload.metadata.namespace, upload.metadata.name or "")
        if running:
            return Result.requeue(POLL_SECONDS)
        location = location_of(self.client, bsl)
        made = {d.snapshot_id for u in uploads for d in u.status.disks}
        snapshots = sorted(made.union(backup_snapshots(obj)))
        try:
            forget(location, snapshots, [metadata_name(namespace, name)])
            freed = f"; {freed_text(prune_location(location))}" if snapshots else ""
        except LockedError:
            return Result.requeue(LOCKED_RETRY_SECONDS)
        self.client.event(
            obj, "Normal", "DataDeleted", f"{len(snapshots)} snapshots forgotten{freed}"
        )
        release(self.client, obj)
        return Result.done()

    @staticmethod
    def _not_moved(
        volumes: list[dict[str, Any]], namespace: str, vm: str, missing: list[str]
    ) -> None:
        """A VM with a missing disk gets no DataUpload: its other disks say why."""
        for entry in volumes:
            mine = (entry["namespace"], entry["virtualMachine"]) == (namespace, vm)
            if mine and entry["phase"] == "Pending":
                entry["phase"] = "Failed"
                entry["reason"] = f"not backed up: the VM misses {', '.join(missing)}"
                entry.pop("dataUpload", None)

    def _upload(self, obj: Backup, namespace: str, vm: str, disks: list[str]) -> None:
        name = upload_name(obj, namespace, vm)
        if self.client.get(DataUpload, obj.metadata.namespace, name) is not None:
            return
        owner = OwnerReference(
            apiVersion=API_VERSION,
            kind="Backup",
            name=obj.metadata.name or "",
            uid=obj.metadata.uid or "",
            controller=True,
        )
        meta = ObjectMeta(
            name=name,
            namespace=obj.metadata.namespace,
            labels={BACKUP_NAME: short_name(obj.metadata.name or "")},
            annotations={VM_NAME: vm, DISKS: ",".join(disks)},
            ownerReferences=[owner],
        )
        self.client.create(
            DataUpload.model_validate(
                {
                    "apiVersion": API_VERSION,
                    "kind": "DataUpload",
                    "metadata": meta.to_json(),
                    "spec": {
                        "backupStorageLocation": obj.spec.storage_location,
                        "sourceNamespace": namespace,
                    },
                }
            )
        )

    def _uploads(self, obj: Backup) -> list[DataUpload]:
        """The Backup's DataUploads."""
        return [
            u
            for u in self.client.list(DataUpload, obj.metadata.namespace)
            if u.metadata.labels.get(BACKUP_NAME) == short_name(obj.metadata.name or "")
        ]

    def _follow(self, obj: Backup) -> Result:
        uploads = {u.metadata.name: u for u in self._uploads(obj)}
        volumes = [v.to_json() for v in obj.status.volumes]
        vms: dict[tuple[str, str], bool] = {}
        done = True
        for entry in volumes:
            key = (entry["namespace"], entry["virtualMachine"])
            vms.setdefault(key, True)
            if entry["action"] != "backup":
                continue
            if entry.get("dataUpload") is None:
                vms[key] = False
                continue
            upload = uploads.get(entry["dataUpload"])
            if upload is None:  # made before the status named it: it was deleted since
                entry["phase"] = "Failed"
                entry["reason"] = f"DataUpload {entry['dataUpload']} was deleted"
                vms[key] = False
                continue
            phase = upload.status.phase
            if phase not in ENDED:
                done = False
                entry["phase"] = "InProgress"
                continue
            entry["phase"] = "Completed" if phase == "Completed" else "Failed"
            if phase == "Completed":
                snaps = {d.name: d.snapshot_id for d in upload.status.disks}
                entry["snapshotID"] = snaps.get(entry["name"])
            else:
                entry["reason"] = (
                    f"DataUpload {upload.metadata.name} {phase}: {upload.status.message}"
                )
                vms[key] = False
        ok = sum(1 for good in vms.values() if good)
        progress = {
            "totalItems": len(vms),
            "itemsBackedUp": ok if done else 0,
            "itemsFailed": len(vms) - ok,
        }
        if not done:
            if [v.to_json() for v in obj.status.volumes] != volumes:
                self.client.patch_status(obj, {"volumes": volumes, "progress": progress})
            return Result.requeue(POLL_SECONDS)
        try:
            self._keep_manifests(obj, volumes, vms)
        except DiskferryError as e:
            return self._end(
                obj,
                BackupPhase.FAILED,
                f"the manifests could not be stored: {e.message}",
                volumes,
                progress,
            )
        if vms and ok == 0:
            phase, message = BackupPhase.FAILED, "no VirtualMachine was backed up"
        elif ok < len(vms):
            phase, message = (
                BackupPhase.PARTIALLY_FAILED,
                f"{len(vms) - ok} of {len(vms)} VirtualMachines failed",
            )
        else:
            phase, message = BackupPhase.COMPLETED, f"{ok} VirtualMachines backed up"
        return self._end(obj, phase, message, volumes, progress)

    def _keep_manifests(
        self, obj: Backup, volumes: list[dict[str, Any]], vms: dict[tuple[str, str], bool]
    ) -> None:
        bsl = self.client.get(
            BackupStorageLocation, obj.metadata.namespace, obj.spec.storage_location
        )
        if bsl is None:
            raise DiskferryError(f"the BackupStorageLocation {obj.spec.storage_location} is gone")
        location = location_of(self.client, bsl)
        machines = []
        for (namespace, name), good in vms.items():
            vm = self.client.get(VirtualMachine, namespace, name)
            if not good or vm is None:
                continue
            disks = []
            for entry in volumes:
                if (entry["namespace"], entry["virtualMachine"]) != (namespace, name):
                    continue
                if entry["kind"] != "VirtualDisk" or entry["phase"] != "Completed":
                    continue
                disk = self.client.get(VirtualDisk, namespace, entry["name"])
                disks.append(
                    {
                        "name": entry["name"],
                        "snapshotID": entry["snapshotID"],
                        "manifest": clean_manifest({} if disk is None else disk.to_json()),
                    }
                )
            machines.append(
                {
                    "manifest": clean_manifest(vm.to_json()),
                    "disks": disks,
                    "tracker": tracker_state(location, repository_vm(namespace, name)),
                }
            )
        document = {
            "apiVersion": API_VERSION,
            "kind": "BackupMetadata",
            "backup": clean_manifest(obj.to_json()),
            "storageLocation": obj.spec.storage_location,
            "virtualMachines": machines,
        }
        store_document(
            location,
            metadata_name(obj.metadata.namespace or "default", obj.metadata.name or ""),
            document,
        )

    def _end(
        self,
        obj: Backup,
        phase: BackupPhase,
        message: str,
        volumes: list[dict[str, Any]],
        progress: dict[str, int],
    ) -> Result:
        status = {
            "phase": phase.value,
            "message": message,
            "volumes": volumes,
            "progress": progress,
            "completionTimestamp": rfc3339(self.clock.now()),
        }
        obj = self.client.patch_status(obj, status)
        self.client.event(
            obj, "Normal" if phase == BackupPhase.COMPLETED else "Warning", phase.value, message
        )
        return Result.done()
