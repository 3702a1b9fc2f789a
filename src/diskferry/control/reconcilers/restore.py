"""Restore: a Backup's VirtualMachines and VirtualDisks made again from the manifests in its
repository (a fresh data directory will do: without the Backup object, each storage location
of the Restore's namespace is looked in), namespaces mapped by `spec.namespaceMapping` and
created when missing. Each VM is created AlwaysOff before its DataDownloads (one per disk,
in the Restore's namespace, labelled `diskferry.io/restore-name`) are; its original runPolicy
is put back only once all of them are Completed, and it is left off, with a Warning Event,
when one is not. A VM that exists already is not touched, and the Restore says so."""

from __future__ import annotations

from typing import Any

from diskferry.control.clock import Clock, rfc3339
from diskferry.control.model import API_VERSION, ObjectMeta, OwnerReference
from diskferry.control.names import short_name
from diskferry.control.reconcilers.backupmeta import metadata_name, read_document
from diskferry.control.reconcilers.bsl import available
from diskferry.control.reconcilers.location import location_of
from diskferry.control.resources.backup import Backup
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.core import Namespace
from diskferry.control.resources.datadownload import BACKUP_PVC_SIZE, DataDownload
from diskferry.control.resources.datamover import ENDED
from diskferry.control.resources.restore import (
    RESTORE_NAME,
    RESTORES,
    RUN_POLICY,
    Restore,
    RestorePhase,
)
from diskferry.control.resources.virtualmachine import RunPolicy, VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result
from diskferry.disk.errors import DiskferryError

POLL_SECONDS = 1.0
WAIT_SECONDS = 2.0
FINISHED = (RestorePhase.COMPLETED, RestorePhase.PARTIALLY_FAILED, RestorePhase.FAILED)


class RestoreReconciler:
    """Runs each Restore through its DataDownloads."""

    info = RESTORES

    def __init__(self, client: Client, clock: Clock | None = None) -> None:
        self.client = client
        self.clock = clock or Clock()

    def reconcile(self, obj: Restore) -> Result:
        """One step of the restore."""
        if obj.metadata.deletion_timestamp is not None or obj.status.phase in FINISHED:
            return Result.done()
        if obj.status.phase in (None, RestorePhase.NEW):
            return self._start(obj)
        return self._follow(obj)

    def _locations(self, obj: Restore) -> list[BackupStorageLocation]:
        backup = self.client.get(Backup, obj.metadata.namespace, obj.spec.backup_name)
        found = self.client.list(BackupStorageLocation, obj.metadata.namespace)
        if backup is not None:
            return [b for b in found if b.metadata.name == backup.spec.storage_location]
        return sorted(found, key=lambda b: not b.spec.default)

    def _document(self, obj: Restore) -> tuple[str, dict[str, Any]] | str:
        """The storage location and the backup's metadata, or what is waited for."""
        name = metadata_name(obj.metadata.namespace or "default", obj.spec.backup_name)
        locations = self._locations(obj)
        if not locations:
            return "waiting for a BackupStorageLocation holding the backup"
        for bsl in locations:
            if not available(bsl):
                return f"waiting for the BackupStorageLocation {bsl.metadata.name} to be Available"
            document = read_document(location_of(self.client, bsl), name)
            if document is not None:
                return bsl.metadata.name or "", document
        return f"waiting for the backup {obj.spec.backup_name}: no storage location holds it yet"

    def _fail(self, obj: Restore, message: str) -> Result:
        status = {
            "phase": RestorePhase.FAILED.value,
            "message": message,
            "completionTimestamp": rfc3339(self.clock.now()),
        }
        obj = self.client.patch_status(obj, status)
        self.client.event(obj, "Warning", "Failed", message)
        return Result.done()

    def _start(self, obj: Restore) -> Result:
        try:
            found = self._document(obj)
        except DiskferryError as e:
            return self._fail(obj, f"the backup's manifests cannot be read: {e.message}")
        if isinstance(found, str):
            if obj.status.message != found:
                self.client.patch_status(obj, {"phase": RestorePhase.NEW.value, "message": found})
            return Result.requeue(WAIT_SECONDS)
        location, document = found
        wanted = set(obj.spec.included_namespaces) - {"*"}
        machines = []
        for entry in document.get("virtualMachines") or []:
            manifest = entry["manifest"]
            source_ns = manifest["metadata"].get("namespace") or "default"
            if wanted and source_ns not in wanted:
                continue
            namespace = obj.spec.namespace_mapping.get(source_ns, source_ns)
            machine = self._machine(obj, location, namespace, entry)
            if machine is not None:
                machines.append(machine)
        status = {
            "phase": RestorePhase.IN_PROGRESS.value,
            "message": f"restoring {len(machines)} VirtualMachines",
            "startTimestamp": rfc3339(self.clock.now()),
            "virtualMachines": machines,
            "progress": {"totalItems": len(machines), "itemsRestored": 0},
            "observedGeneration": obj.metadata.generation,
        }
        obj = self.client.patch_status(obj, status)
        self.client.event(obj, "Normal", "InProgress", status["message"])
        return Result.requeue(POLL_SECONDS)

    def _machine(
        self, obj: Restore, location: str, namespace: str, entry: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Create the VM (AlwaysOff) and a DataDownload per disk; None when the VM exists."""
        manifest = entry["manifest"]
        name = manifest["metadata"]["name"]
        run_policy = manifest["spec"].get("runPolicy", "AlwaysOff")
        if self.client.get(Namespace, None, namespace) is None:
            self.client.create(Namespace.model_validate({"metadata": {"name": namespace}}))
        existing = self.client.get(VirtualMachine, namespace, name)
        if existing is None:
            meta = {**manifest["metadata"], "namespace": namespace}
            meta["annotations"] = {**meta.get("annotations", {}), RUN_POLICY: run_policy}
            spec = {**manifest["spec"], "runPolicy": "AlwaysOff"}
            self.client.create(
                VirtualMachine.model_validate({**manifest, "metadata": meta, "spec": spec})
            )
        elif existing.metadata.annotations.get(RUN_POLICY) is None:
            message = f"the VirtualMachine {namespace}/{name} exists already: it is not restored"
            self.client.event(obj, "Warning", "AlreadyExists", message)
            return None
        disks = []
        for disk in entry.get("disks") or []:
            download = self._download(obj, location, namespace, name, disk)
            disks.append(
                {"name": disk["name"], "snapshotID": disk["snapshotID"], "dataDownload": download}
            )
        return {"namespace": namespace, "name": name, "runPolicy": run_policy, "disks": disks}

    def _download(
        self, obj: Restore, location: str, namespace: str, vm: str, disk: dict[str, Any]
    ) -> str:
        name = short_name(obj.metadata.name or "", vm, disk["name"])
        if self.client.get(DataDownload, obj.metadata.namespace, name) is not None:
            return name
        owner = OwnerReference(
            apiVersion=API_VERSION,
            kind="Restore",
            name=obj.metadata.name or "",
            uid=obj.metadata.uid or "",
            controller=True,
        )
        annotations = {}
        size = (
            ((disk.get("manifest") or {}).get("spec") or {})
            .get("persistentVolumeClaim", {})
            .get("size")
        )
        if size:
            annotations[BACKUP_PVC_SIZE] = str(size)
        meta = ObjectMeta(
            name=name,
            namespace=obj.metadata.namespace,
            labels={RESTORE_NAME: short_name(obj.metadata.name or "")},
            annotations=annotations,
            ownerReferences=[owner],
        )
        spec = {
            "backupStorageLocation": location,
            "snapshotID": disk["snapshotID"],
            "targetVolume": {"pvc": disk["name"], "namespace": namespace},
        }
        body = {
            "apiVersion": API_VERSION,
            "kind": "DataDownload",
            "metadata": meta.to_json(),
            "spec": spec,
        }
        self.client.create(DataDownload.model_validate(body))
        return name

    def _follow(self, obj: Restore) -> Result:
        machines = [m.to_json() for m in obj.status.virtual_machines]
        for machine in machines:
            if machine["phase"] != "Restoring":
                continue
            for disk in machine["disks"]:
                self._follow_disk(obj, disk)
            phases = [disk["phase"] for disk in machine["disks"]]
            if any(p not in ENDED for p in phases):
                continue
            if all(p == "Completed" for p in phases):
                self._give_back(obj, machine)
                machine["phase"] = "Completed"
            else:
                machine["phase"] = "Failed"
                why = "; ".join(d["message"] for d in machine["disks"] if d.get("message"))
                message = (
                    f"VirtualMachine {machine['namespace']}/{machine['name']} left AlwaysOff: {why}"
                )
                self.client.event(obj, "Warning", "VirtualMachineLeftOff", message)
        restored = sum(1 for m in machines if m["phase"] == "Completed")
        progress = {"totalItems": len(machines), "itemsRestored": restored}
        if any(m["phase"] == "Restoring" for m in machines):
            if [m.to_json() for m in obj.status.virtual_machines] != machines:
                self.client.patch_status(obj, {"virtualMachines": machines, "progress": progress})
            return Result.requeue(POLL_SECONDS)
        if restored == len(machines):
            phase, kind = RestorePhase.COMPLETED, "Normal"
        elif restored:
            phase, kind = RestorePhase.PARTIALLY_FAILED, "Warning"
        else:
            phase, kind = RestorePhase.FAILED, "Warning"
        message = f"{restored} of {len(machines)} VirtualMachines restored"
        status = {
            "phase": phase.value,
            "message": message,
            "virtualMachines": machines,
            "progress": progress,
            "completionTimestamp": rfc3339(self.clock.now()),
        }
        obj = self.client.patch_status(obj, status)
        self.client.event(obj, kind, phase.value, message)
        return Result.done()

    def _follow_disk(self, obj: Restore, disk: dict[str, Any]) -> None:
        """The phase of the disk's DataDownload, and why it did not complete; one that the
        status named and that is gone was deleted, and counts as failed."""
        name = disk["dataDownload"]
        download = self.client.get(DataDownload, obj.metadata.namespace, name)
        if download is None:
            disk["phase"], disk["message"] = "Failed", f"DataDownload {name} was deleted"
            return
        disk["phase"] = download.status.phase
        if disk["phase"] in ENDED and disk["phase"] != "Completed":
            disk["message"] = f"DataDownload {name} {disk['phase']}: {download.status.message}"

    def _give_back(self, obj: Restore, machine: dict[str, Any]) -> None:
        """The VM's own runPolicy again, now that every disk of it is back."""
        vm = self.client.get(VirtualMachine, machine["namespace"], machine["name"])
        if vm is None:
            return
        annotations = {k: v for k, v in vm.metadata.annotations.items() if k != RUN_POLICY}
        meta = vm.metadata.model_copy(update={"annotations": annotations})
        spec = vm.spec.model_copy(update={"run_policy": RunPolicy(machine["runPolicy"])})
        self.client.update(vm.model_copy(update={"metadata": meta, "spec": spec}))
        message = (
            f"VirtualMachine {machine['namespace']}/{machine['name']}: all disks restored, "
            f"runPolicy {machine['runPolicy']} again"
        )
        self.client.event(obj, "Normal", "VirtualMachineRestored", message)
