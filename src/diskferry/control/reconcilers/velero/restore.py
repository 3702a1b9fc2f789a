"""Restore: a Backup's VirtualMachines and VirtualDisks made again from the manifests in its
repository (a fresh data directory will do: without the Backup object, each storage location
of the Restore's namespace is looked in), namespaces mapped by `spec.namespaceMapping` and
created when missing, picked by Velero's namespace, resource and label filters. The Backup is
`spec.backupName`, or the latest Completed one `spec.scheduleName` made (written into
backupName); neither, both, or one that failed is FailedValidation.

Each VM is created AlwaysOff before its DataDownloads (one per disk with data, in the
Restore's namespace, labelled `diskferry.io/restore-name`) are; a disk backed up without data,
or every disk when `restorePVs` is false, is made from its manifest instead. The VM's original
runPolicy is put back only once all its disks are, and it is left off, with a Warning Event,
when one is not. The images the VMs mount that the filters take are made from their manifests
when missing. What exists already is left as it is (`existingResourcePolicy` none, with a
Warning Event; a VM whose disk exists is left AlwaysOff, that disk Failed); with `update`, a
stopped VM gets the backup's spec, labels and annotations and its missing disks restored,
existing disks get the backup's labels and annotations, and no disk's data is ever
overwritten; a running VM is left, saying so. The exec hooks that take a restored VM run in
its guest once it runs (see restorehooks); the Restore ends after them. The manifests are read
from each location by a backup worker, `rs-<uid>-<the location's uid>`.

A KubeVirt VM of the backup (in a cluster, `host.points`) is made again held with `runStrategy:
Halted` (one of its name that exists is left, with a Warning Event), each of its claims with
data restored by a DataDownload into a claim of the same name (`diskferry.io/restore-into-claim`),
and its own runStrategy given back once every one of them is, as OADP does; it stays Halted
when one is not."""

from __future__ import annotations

from typing import Any

from diskferry.backup import Chores, ChoresJob, ChoresResult
from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.host.machines import Machines
from diskferry.control.host.points import BackupPoints
from diskferry.control.reconcilers.velero.backup import positive
from diskferry.control.reconcilers.velero.backupstoragelocation import available
from diskferry.control.reconcilers.velero.manifests import READ_FILE, metadata_name, metadata_read
from diskferry.control.reconcilers.velero.repoaccess import location_of
from diskferry.control.reconcilers.velero.restorehooks import WAITING, RestoreHooks, stopped
from diskferry.control.reconcilers.velero.selection import ClusterImages, Taken, restore_taken
from diskferry.control.resources.backup import Backup, BackupPhase
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.core import Namespace
from diskferry.control.resources.datadownload import BACKUP_PVC_SIZE, INTO_CLAIM, DataDownload
from diskferry.control.resources.datamover import ENDED
from diskferry.control.resources.model import API_VERSION, ObjectMeta, OwnerReference, Resource
from diskferry.control.resources.names import short_name
from diskferry.control.resources.restore import (
    RESTORE_NAME,
    RESTORES,
    RUN_POLICY,
    ExistingResourcePolicy,
    Restore,
    RestorePhase,
)
from diskferry.control.resources.schedule import SCHEDULE_NAME
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import ClusterVirtualImage, VirtualImage
from diskferry.control.resources.virtualmachine import MachinePhase, RunPolicy, VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs

POLL_SECONDS = 1.0
WAIT_SECONDS = 2.0
JOB_POLL_SECONDS = 0.25
"""How often a Restore looks at the worker reading the backup's manifests."""
FINISHED = (
    RestorePhase.COMPLETED,
    RestorePhase.PARTIALLY_FAILED,
    RestorePhase.FAILED,
    RestorePhase.FAILED_VALIDATION,
)
RESTORABLE = (BackupPhase.COMPLETED, BackupPhase.PARTIALLY_FAILED)
NO_VMS = "the resource filters take no VirtualMachine: nothing is restored"
KUBEVIRT = "kubevirt.io/"
"""The apiVersion prefix of a KubeVirt VM's manifest, which a cluster's hypervisor holds."""
IMAGE_MODELS: dict[str, type[Resource]] = {
    "VirtualImage": VirtualImage,
    "ClusterVirtualImage": ClusterVirtualImage,
}


def _meta_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest.get("metadata") or {}


class RestoreReconciler:
    """Runs each Restore through its DataDownloads."""

    info = RESTORES

    def __init__(
        self,
        client: Client,
        clock: Clock | None,
        machines: Machines | None,
        runner: Runner,
        points: BackupPoints | None = None,
    ) -> None:
        self.client = client
        self.jobs = Jobs(runner)
        self.clock = clock or Clock()
        self.hooks = None if machines is None else RestoreHooks(client, runner, machines)
        self.points = points

    def reconcile(self, obj: Restore) -> Result:
        """One step of the restore."""
        if obj.metadata.deletion_timestamp is not None or obj.status.phase in FINISHED:
            return Result.done()
        if obj.status.phase in (None, RestorePhase.NEW):
            return self._start(obj)
        return self._follow(obj)

    def _source(self, obj: Restore) -> Restore | list[str]:
        """The Restore with its backup named (the schedule's latest Completed Backup put in
        backupName, written once its manifests are read: `_chose`), or why it cannot be
        restored."""
        errors = obj.spec.source_errors()
        if errors:
            return errors
        if obj.spec.backup_name:
            backup = self.client.get(Backup, obj.metadata.namespace, obj.spec.backup_name)
            if backup is not None and backup.status.phase in (
                BackupPhase.FAILED,
                BackupPhase.FAILED_VALIDATION,
            ):
                return [
                    f"the Backup {obj.spec.backup_name} is {backup.status.phase.value}: only "
                    "Completed and PartiallyFailed backups can be restored"
                ]
            return obj
        schedule = obj.spec.schedule_name or ""
        made = [
            b
            for b in self.client.list(
                Backup, obj.metadata.namespace, labels={SCHEDULE_NAME: schedule}
            )
            if b.status.phase in RESTORABLE
        ]
        if not made:
            return [f"no Completed Backup of the Schedule {schedule} to restore"]
        latest = max(made, key=lambda b: (b.status.start_timestamp or 0, b.metadata.name))
        spec = obj.spec.model_copy(update={"backup_name": latest.metadata.name})
        return obj.model_copy(update={"spec": spec})

    def _chose(self, obj: Restore) -> Restore:
        """Write the backup `_source` chose of the Restore's schedule into its backupName."""
        obj = self.client.update(obj)
        self.client.event(
            obj,
            "Normal",
            "BackupChosen",
            f"restoring {obj.spec.backup_name}, the latest Backup of the Schedule "
            f"{obj.spec.schedule_name}",
        )
        return obj

    def _locations(self, obj: Restore) -> list[BackupStorageLocation]:
        backup = self.client.get(Backup, obj.metadata.namespace, obj.spec.backup_name or "")
        found = self.client.list(BackupStorageLocation, obj.metadata.namespace)
        if backup is not None:
            return [b for b in found if b.metadata.name == backup.spec.storage_location]
        return sorted(found, key=lambda b: not b.spec.default)

    def _document(self, obj: Restore) -> tuple[str, dict[str, Any]] | str | None:
        """The first storage location holding the backup's metadata and that metadata, what
        is waited for, or None while workers read it (DiskferryError when it cannot be read):
        each location is read, in order, up to one that is not Available."""
        name = metadata_name(obj.metadata.namespace or "default", obj.spec.backup_name or "")
        locations = self._locations(obj)
        if not locations:
            return "waiting for a BackupStorageLocation holding the backup"
        waiting = f"waiting for the backup {obj.spec.backup_name}: no storage location holds it yet"
        looked: list[BackupStorageLocation] = []
        for bsl in locations:
            if not available(bsl):
                waiting = (
                    f"waiting for the BackupStorageLocation {bsl.metadata.name} to be Available"
                )
                break
            looked.append(bsl)
        runs = [
            (
                f"rs-{obj.metadata.uid}-{bsl.metadata.uid}",
                *location_of(self.client, bsl).job(
                    ChoresJob, chores=Chores(read=[name]), output=READ_FILE
                ),
            )
            for bsl in looked
        ]
        ended = self.jobs.chores(runs, ChoresResult, tag(obj), (READ_FILE,)) if runs else []
        if ended is None:
            return None
        for bsl, outcome in zip(looked, ended, strict=True):
            if isinstance(outcome, Failed):
                raise DiskferryError(outcome.message, reason=outcome.reason)
            document = metadata_read(outcome).documents.get(name)
            if document is not None:
                return bsl.metadata.name or "", document
        return waiting

    def _end(self, obj: Restore, phase: RestorePhase, message: str, **fields: Any) -> Result:
        status = {
            **fields,
            "phase": phase.value,
            "message": message,
            "completionTimestamp": rfc3339(self.clock.now()),
            "observedGeneration": obj.metadata.generation,
        }
        if phase == RestorePhase.FAILED:
            status["failureReason"] = message
        kind = "Normal" if phase == RestorePhase.COMPLETED else "Warning"
        self.client.event(obj, kind, phase.value, message)
        self.client.patch_status(obj, status)
        return Result.done()

    def _start(self, obj: Restore) -> Result:
        source = self._source(obj)
        if isinstance(source, list):
            return self._end(
                obj,
                RestorePhase.FAILED_VALIDATION,
                "; ".join(source),
                validationErrors=source,
            )
        obj = source
        try:
            found = self._document(obj)
        except DiskferryError as e:
            return self._end(
                obj, RestorePhase.FAILED, f"the backup's manifests cannot be read: {e.message}"
            )
        if found is None:
            return Result.requeue(JOB_POLL_SECONDS)
        if isinstance(found, str):
            if obj.status.message != found:
                self.client.patch_status(obj, {"phase": RestorePhase.NEW.value, "message": found})
            return Result.requeue(WAIT_SECONDS)
        location, document = found
        if obj.spec.schedule_name:
            obj = self._chose(obj)
        taken = restore_taken(obj.spec)
        machines = []
        kept = 0
        entries = (document.get("virtualMachines") or []) if taken.vms else []
        chosen = [e for e in entries if self._chosen(obj, e["manifest"])]
        for entry in chosen:
            source_ns = _meta_of(entry["manifest"]).get("namespace") or "default"
            namespace = obj.spec.namespace_mapping.get(source_ns, source_ns)
            machine = self._machine(obj, location, namespace, entry, taken)
            if machine is None:
                kept += 1
            else:
                machines.append(machine)
        self._images(obj, document, chosen, taken)
        message = f"restoring {len(machines)} VirtualMachines" if taken.vms else NO_VMS
        status = {
            "phase": RestorePhase.IN_PROGRESS.value,
            "message": message,
            "startTimestamp": rfc3339(self.clock.now()),
            "virtualMachines": machines,
            "progress": {"totalItems": len(machines), "itemsRestored": 0},
            "warnings": kept + (0 if taken.vms else 1),
            "observedGeneration": obj.metadata.generation,
        }
        kind, reason = ("Normal", "InProgress") if taken.vms else ("Warning", "NothingSelected")
        self.client.event(obj, kind, reason, message)
        self.client.patch_status(obj, status)
        return Result.requeue(POLL_SECONDS)

    def _chosen(self, obj: Restore, manifest: dict[str, Any]) -> bool:
        """Whether the restore's namespace and label filters take the VM of `manifest`."""
        meta = _meta_of(manifest)
        spec = obj.spec
        return spec.namespace_taken(meta.get("namespace") or "default") and spec.labels_match(
            meta.get("labels") or {}
        )

    def _images(
        self, obj: Restore, document: dict[str, Any], chosen: list[dict[str, Any]], taken: Taken
    ) -> None:
        """Make the backed-up images the filters take that are missing."""
        mounted = {
            (ref.get("kind"), ref.get("name"))
            for entry in chosen
            for ref in entry["manifest"].get("spec", {}).get("blockDeviceRefs") or []
        }
        namespaces = {
            (ref.get("kind"), ref.get("name")): _meta_of(entry["manifest"]).get("namespace")
            for entry in chosen
            for ref in entry["manifest"].get("spec", {}).get("blockDeviceRefs") or []
        }
        for image in document.get("images") or []:
            kind, name = image["kind"], image["name"]
            if kind == "VirtualImage":
                if not taken.images or (kind, name) not in mounted:
                    continue
                source_ns = namespaces[(kind, name)] or "default"
                namespace: str | None = obj.spec.namespace_mapping.get(source_ns, source_ns)
            else:
                if taken.cluster_images is ClusterImages.NONE:
                    continue
                if taken.cluster_images is ClusterImages.RELATED and (kind, name) not in mounted:
                    continue
                namespace = None
            model = IMAGE_MODELS[kind]
            if self.client.get(model, namespace, name) is not None:
                continue
            meta = {**_meta_of(image["manifest"]), "name": name}
            if namespace is None:
                meta.pop("namespace", None)
            else:
                meta["namespace"] = namespace
            self.client.create(model.model_validate({**image["manifest"], "metadata": meta}))
            where = name if namespace is None else f"{namespace}/{name}"
            self.client.event(obj, "Normal", "ImageRestored", f"{kind} {where} made again")

    def _namespace(self, namespace: str) -> None:
        if self.client.get(Namespace, None, namespace) is None:
            self.client.create(Namespace.model_validate({"metadata": {"name": namespace}}))

    def _machine(
        self, obj: Restore, location: str, namespace: str, entry: dict[str, Any], taken: Taken
    ) -> dict[str, Any] | None:
        """Create (or update) the VM, AlwaysOff, and restore its disks; None when it is left
        as it is."""
        manifest = entry["manifest"]
        if self.points is not None and str(manifest.get("apiVersion")).startswith(KUBEVIRT):
            return self._hosted(obj, location, namespace, entry)
        name = _meta_of(manifest)["name"]
        run_policy = manifest["spec"].get("runPolicy", "AlwaysOff")
        self._namespace(namespace)
        meta = {**_meta_of(manifest), "namespace": namespace}
        meta["annotations"] = {**meta.get("annotations", {}), RUN_POLICY: run_policy}
        spec = {**manifest["spec"], "runPolicy": "AlwaysOff"}
        existing = self.client.get(VirtualMachine, namespace, name)
        updated = None
        if existing is None:
            self.client.create(
                VirtualMachine.model_validate({**manifest, "metadata": meta, "spec": spec})
            )
        elif existing.metadata.annotations.get(RUN_POLICY) is None:
            left = self._left(obj, existing)
            if left is not None:
                self.client.event(obj, "Warning", "AlreadyExists", left)
                return None
            wanted = VirtualMachine.model_validate({**manifest, "metadata": meta, "spec": spec})
            merged = existing.metadata.model_copy(
                update={
                    "labels": wanted.metadata.labels,
                    "annotations": wanted.metadata.annotations,
                }
            )
            self.client.update(
                existing.model_copy(update={"metadata": merged, "spec": wanted.spec})
            )
            self.client.event(
                obj,
                "Normal",
                "VirtualMachineUpdated",
                f"the VirtualMachine {namespace}/{name} existed: it has the backup's spec, labels "
                "and annotations",
            )
            updated = True
        disks = []
        if taken.disks:
            for disk in entry.get("disks") or []:
                disks.append(self._disk(obj, location, namespace, name, disk))
        machine = {"namespace": namespace, "name": name, "runPolicy": run_policy, "disks": disks}
        if updated:
            machine["updated"] = True
        return machine

    def _hosted(
        self, obj: Restore, location: str, namespace: str, entry: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Make the KubeVirt VM again, held Halted, and restore each claim with data into a
        claim of its name; None when a VM of its name is there (it is left as it is)."""
        assert self.points is not None
        name = _meta_of(entry["manifest"])["name"]
        self._namespace(namespace)
        strategy = self.points.hold(namespace, entry["manifest"])
        if strategy is None:
            left = f"the VirtualMachine {namespace}/{name} exists already: it is not restored"
            self.client.event(obj, "Warning", "AlreadyExists", left)
            return None
        disks = []
        for disk in entry.get("disks") or []:
            if not disk.get("snapshotID") or obj.spec.restore_pvs is False:
                why = (
                    "spec.restorePVs is false"
                    if obj.spec.restore_pvs is False
                    else "the backup holds no data of it"
                )
                message = f"not made, no data restored: {why}"
                disks.append({"name": disk["name"], "phase": "Completed", "message": message})
                continue
            download = short_name(obj.metadata.name or "", name, disk["name"])
            self._download(obj, location, namespace, name, disk, download, into_claim=True)
            disks.append(
                {"name": disk["name"], "snapshotID": disk["snapshotID"], "dataDownload": download}
            )
        return {"namespace": namespace, "name": name, "runStrategy": strategy, "disks": disks}

    def _left(self, obj: Restore, vm: VirtualMachine) -> str | None:
        """Why the existing VM is left as it is, None when the restore updates it."""
        where = f"{vm.metadata.namespace}/{vm.metadata.name}"
        if obj.spec.existing_resource_policy != ExistingResourcePolicy.UPDATE:
            return f"the VirtualMachine {where} exists already: it is not restored"
        if vm.status.phase not in (None, MachinePhase.STOPPED, MachinePhase.PENDING):
            return (
                f"the VirtualMachine {where} exists and is {vm.status.phase.value}: "
                "existingResourcePolicy update changes only a stopped VM; it is left as it is"
            )
        return None

    def _disk(
        self, obj: Restore, location: str, namespace: str, vm: str, disk: dict[str, Any]
    ) -> dict[str, Any]:
        """Restore one disk: by a DataDownload of its snapshot, or from its manifest; one that
        exists already (and was not made by this restore) is left, or relabelled on update."""
        name = disk["name"]
        download = short_name(obj.metadata.name or "", vm, name)
        existing = self.client.get(VirtualDisk, namespace, name)
        label = short_name(obj.metadata.name or "")
        ours = existing is not None and (
            existing.metadata.labels.get(RESTORE_NAME) == label
            or self.client.get(DataDownload, obj.metadata.namespace, download) is not None
        )
        if existing is not None and not ours:
            if obj.spec.existing_resource_policy != ExistingResourcePolicy.UPDATE:
                message = (
                    f"the VirtualDisk {namespace}/{name} exists already: it is not restored "
                    "over (existingResourcePolicy update keeps it for the VM)"
                )
                return {"name": name, "phase": "Failed", "message": message}
            meta = _meta_of(disk.get("manifest") or {})
            labels = {**existing.metadata.labels, **(meta.get("labels") or {})}
            annotations = {**existing.metadata.annotations, **(meta.get("annotations") or {})}
            merged = existing.metadata.model_copy(
                update={"labels": labels, "annotations": annotations}
            )
            self.client.update(existing.model_copy(update={"metadata": merged}))
            message = (
                "the VirtualDisk exists already: it has the backup's labels and annotations, "
                "its data is left as it is"
            )
            return {"name": name, "phase": "Skipped", "message": message}
        if not disk.get("snapshotID") or obj.spec.restore_pvs is False:
            if existing is None:
                self._from_manifest(namespace, disk, label)
            why = (
                "spec.restorePVs is false"
                if obj.spec.restore_pvs is False
                else "the backup holds no data of it"
            )
            return {
                "name": name,
                "phase": "Completed",
                "message": f"made from its manifest, no data restored: {why}",
            }
        self._download(obj, location, namespace, vm, disk, download)
        return {"name": name, "snapshotID": disk["snapshotID"], "dataDownload": download}

    def _from_manifest(self, namespace: str, disk: dict[str, Any], label: str) -> None:
        """Make the disk as its manifest says, labelled with the restore's name."""
        manifest = disk.get("manifest") or {}
        meta = {**_meta_of(manifest), "name": disk["name"], "namespace": namespace}
        meta["labels"] = {**(meta.get("labels") or {}), RESTORE_NAME: label}
        self.client.create(VirtualDisk.model_validate({**manifest, "metadata": meta}))

    def _download(
        self,
        obj: Restore,
        location: str,
        namespace: str,
        vm: str,
        disk: dict[str, Any],
        name: str,
        into_claim: bool = False,
    ) -> None:
        if self.client.get(DataDownload, obj.metadata.namespace, name) is not None:
            return
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
        if into_claim:
            annotations[INTO_CLAIM] = "true"
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
        timeout = positive(obj.spec.item_operation_timeout)
        if timeout is not None:
            spec["operationTimeout"] = timeout
        body = {
            "apiVersion": API_VERSION,
            "kind": "DataDownload",
            "metadata": meta.to_json(),
            "spec": spec,
        }
        self.client.create(DataDownload.model_validate(body))

    def _follow(self, obj: Restore) -> Result:
        machines = [m.to_json() for m in obj.status.virtual_machines]
        now = self.clock.now()
        for machine in machines:
            if machine.get("hooks") == WAITING and self.hooks is not None:
                self.hooks.step(obj, machine, machines, now)
            if machine["phase"] != "Restoring":
                continue
            for disk in machine["disks"]:
                if disk.get("dataDownload"):
                    self._follow_disk(obj, disk)
            phases = [disk.get("phase") for disk in machine["disks"]]
            if any(p not in (*ENDED, "Skipped") for p in phases):
                continue
            hosted = machine.get("runStrategy") is not None
            if all(p in ("Completed", "Skipped") for p in phases):
                self._give_back(obj, machine)
                machine["phase"] = "Completed"
                if self.hooks is not None and not hosted:
                    self.hooks.begin(obj, machine, now)
            else:
                machine["phase"] = "Failed"
                why = "; ".join(d["message"] for d in machine["disks"] if d.get("message"))
                held = "Halted" if hosted else "AlwaysOff"
                message = (
                    f"VirtualMachine {machine['namespace']}/{machine['name']} left {held}: {why}"
                )
                self.client.event(obj, "Warning", "VirtualMachineLeftOff", message)
        downloads = [d for m in machines for d in m["disks"] if d.get("dataDownload")]
        fields: dict[str, Any] = {
            "virtualMachines": machines,
            "restoreItemOperationsAttempted": len(downloads),
            "restoreItemOperationsCompleted": sum(d.get("phase") == "Completed" for d in downloads),
            "restoreItemOperationsFailed": sum(
                d.get("phase") in ENDED and d.get("phase") != "Completed" for d in downloads
            ),
        }
        restored = sum(1 for m in machines if m["phase"] == "Completed")
        fields["progress"] = {"totalItems": len(machines), "itemsRestored": restored}
        runs = [run for m in machines for run in m.get("hookRuns") or []]
        if runs:
            failed_runs = sum(1 for run in runs if run["failed"])
            fields["hookStatus"] = {"hooksAttempted": len(runs), "hooksFailed": failed_runs}
        if any(m["phase"] == "Restoring" or m.get("hooks") == WAITING for m in machines):
            fields["phase"] = RestorePhase.WAITING_FOR_PLUGIN_OPERATIONS.value
            current = obj.status.to_json()
            if any(current.get(key) != value for key, value in fields.items()):
                self.client.patch_status(obj, fields)
            return Result.requeue(POLL_SECONDS)
        failed = len(machines) - restored
        hook_failures = [run for run in runs if run["failed"]]
        if not failed and not stopped(machines):
            phase = RestorePhase.COMPLETED
        elif restored:
            phase = RestorePhase.PARTIALLY_FAILED
        else:
            phase = RestorePhase.FAILED
        if obj.status.message == NO_VMS:
            message = NO_VMS
        else:
            message = f"{restored} of {len(machines)} VirtualMachines restored"
        if hook_failures:
            message += f"; {len(hook_failures)} of {len(runs)} hooks failed"
        fields["warnings"] = (obj.status.warnings or 0) + sum(
            1 for run in hook_failures if run["onError"] != "Fail"
        )
        errors = failed + sum(1 for run in hook_failures if run["onError"] == "Fail")
        return self._end(obj, phase, message, errors=errors, **fields)

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
        """The VM's own runPolicy (a KubeVirt VM's runStrategy) again, now that every disk of
        it is back."""
        where = f"{machine['namespace']}/{machine['name']}"
        if machine.get("runStrategy") is not None:
            if self.points is not None:
                self.points.give_back(machine["namespace"], machine["name"])
            message = (
                f"VirtualMachine {where}: all disks restored, runStrategy "
                f"{machine['runStrategy']} again"
            )
            self.client.event(obj, "Normal", "VirtualMachineRestored", message)
            return
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
