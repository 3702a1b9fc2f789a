"""Backup: the VMs that the namespace (globs), resource and label filters pick, one DataUpload
each (in the Backup's namespace, labelled `diskferry.io/backup-name`, owned by the Backup);
the volume policy says which of each VM's disks have their data moved, and `status.volumes`
lists every block device with what happened to it (a VM one of whose VirtualDisks to move does
not exist gets no DataUpload, and fails). A Backup whose resource filters take no
VirtualMachine backs up nothing, and says so. Once every upload ended, the manifests of the
VMs backed up, of their VirtualDisks (with the snapshot of each whose data moved), of the
images the filters take, and the repository's tracker of each VM go into the repository as
the Backup's metadata; then Completed, PartiallyFailed (some VMs failed) or Failed (all did).
A stopped VM is backed up as a running one is (the engine opens its disks itself). In a cluster
the filters take KubeVirt's VMs too (`host.points`): each of their volumes' claims is a
`PersistentVolumeClaim` entry of `status.volumes`, moved by the VM's DataUpload through
KubeVirt's backup API, and the metadata keeps the VM's manifest and each claim's snapshot.
The hooks that apply to a VM go to its DataUpload (`diskferry.io/hooks`), which runs them in a
running VM's guest; `status.hookStatus` counts them.

Every repository chore runs in a backup worker, `bk-<uid>-<chore>`: the metadata stored
(`store`, by a worker started with the Backup that opens the repository while the uploads run
and then waits for its chores), read for a synced Backup (`read`), and what the finalizer
lets go (`drop`).

A Backup that names no storage location gets the namespace's `default: true` one written into
its spec; one without, a location that does not exist or is ReadOnly, or filters Velero
refuses make it FailedValidation with `status.validationErrors`. Every Backup is deleted once
it ended and its ttl (720h when unset or 0) ran out; a finalizer holds it (phase Deleting)
until its snapshots are forgotten, its metadata removed and the repository pruned, so that
deleting it leaves none of its data and touches no other's. A Backup the location's sync made
from the repository's metadata takes its status from there, and is never run again."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from diskferry.backup import Chores, ChoresJob, ChoresResult, StoredMetadata
from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock, rfc3339
from diskferry.control.host.points import BackupPoints, HostedMachine
from diskferry.control.reconcilers.velero.backupstoragelocation import available
from diskferry.control.reconcilers.velero.forgetting import backup_snapshots, freed_text, let_go
from diskferry.control.reconcilers.velero.hookspecs import backup_hooks
from diskferry.control.reconcilers.velero.manifests import (
    READ_FILE,
    SYNCED_FROM,
    metadata_name,
    metadata_read,
)
from diskferry.control.reconcilers.velero.metadatadocument import backup_document
from diskferry.control.reconcilers.velero.repoaccess import location_of
from diskferry.control.reconcilers.velero.selection import (
    Taken,
    backup_taken,
)
from diskferry.control.reconcilers.velero.volumepolicy import decide
from diskferry.control.resources.backup import (
    BACKUP_NAME,
    BACKUPS,
    DEFAULT_TTL,
    Backup,
    BackupPhase,
)
from diskferry.control.resources.backupstoragelocation import BackupStorageLocation
from diskferry.control.resources.datamover import ENDED
from diskferry.control.resources.dataupload import DISKS, HOOKS, VM_NAME, DataUpload
from diskferry.control.resources.duration import parse_duration
from diskferry.control.resources.model import API_VERSION, ObjectMeta, OwnerReference, Resource
from diskferry.control.resources.names import short_name
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import ClusterVirtualImage, VirtualImage
from diskferry.control.resources.virtualmachine import BlockDeviceKind, VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import FINALIZER, deleting, held, release
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import JobFile, Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Succeeded

POLL_SECONDS = 1.0
EXPIRY_POLL_SECONDS = 300.0
JOB_POLL_SECONDS = 0.25
"""How often a Backup looks at the worker running its chores in the repository."""
CHORES_FILE = "chores.json"
"""The file the worker that stores a Backup's metadata waits for its chores in."""
ENDED_PHASES = (
    BackupPhase.COMPLETED,
    BackupPhase.PARTIALLY_FAILED,
    BackupPhase.FAILED,
    BackupPhase.FAILED_VALIDATION,
)
DEVICE_MODELS: dict[BlockDeviceKind, type[Resource]] = {
    BlockDeviceKind.VIRTUAL_DISK: VirtualDisk,
    BlockDeviceKind.VIRTUAL_IMAGE: VirtualImage,
    BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE: ClusterVirtualImage,
}
NO_VMS = "the resource filters take no VirtualMachine: nothing is backed up"
DISKS_LEFT_OUT = "the resource filters leave VirtualDisks out: neither its manifest nor its data"
NO_DATA = "spec.snapshotVolumes is false: its manifest is kept, not its data"
CLAIM_KIND = "PersistentVolumeClaim"


def upload_name(backup: Backup, namespace: str, vm: str) -> str:
    """The DataUpload of `vm`: the backup's name and the VM's (its namespace when another),
    cut to a label's length."""
    if namespace == backup.metadata.namespace:
        return short_name(backup.metadata.name or "", vm)
    return short_name(backup.metadata.name or "", namespace, vm)


def ttl_seconds(backup: Backup) -> float:
    """How long the Backup is kept: its ttl, or DEFAULT_TTL when that is unset or 0."""
    given = parse_duration(backup.spec.ttl or "0s").total_seconds()
    return given or parse_duration(DEFAULT_TTL).total_seconds()


def positive(duration: str | None) -> str | None:
    """`duration` when it is more than 0, else None (Velero reads 0 as its default)."""
    if duration is None or not parse_duration(duration).total_seconds():
        return None
    return duration


class BackupReconciler:
    """Runs each Backup through its DataUploads."""

    info = BACKUPS

    def __init__(
        self,
        client: Client,
        runner: Runner,
        clock: Clock | None = None,
        points: BackupPoints | None = None,
    ) -> None:
        self.client = client
        self.jobs = Jobs(runner)
        self.clock = clock or Clock()
        self.points = points

    def job_id(self, obj: Backup, chore: str) -> str:
        """The id of the job that runs the Backup's `chore`: `store` its metadata, `read` it
        (a synced Backup), `drop` its data."""
        return f"bk-{obj.metadata.uid}-{chore}"

    def _repository_job(
        self, obj: Backup, **fields: Any
    ) -> tuple[ChoresJob, list[JobFile]] | Failed:
        """A chores job (with `fields`) in the repository of the Backup's location, or why
        there is none."""
        where = obj.spec.storage_location or ""
        bsl = self.client.get(BackupStorageLocation, obj.metadata.namespace, where)
        try:
            if bsl is None:
                raise DiskferryError(f"the BackupStorageLocation {where} is gone")
            return location_of(self.client, bsl).job(ChoresJob, **fields)
        except DiskferryError as e:
            return Failed(e.reason, e.message)

    def _chore(
        self, obj: Backup, chore: str, chores: Chores, wait: bool = False
    ) -> Succeeded[ChoresResult] | Failed | None:
        """Run `chores` in the repository of the Backup's location (waiting for locks when
        `wait`, what they read written to READ_FILE): None while the worker runs, then how it
        ended."""
        made = self._repository_job(obj, chores=chores, wait=wait, output=READ_FILE)
        if isinstance(made, Failed):
            return made
        job_id = self.job_id(obj, chore)
        return self.jobs.chore(job_id, *made, ChoresResult, tag(obj), (READ_FILE,))

    def _store(
        self, obj: Backup, document: StoredMetadata
    ) -> Succeeded[ChoresResult] | Failed | None:
        """Store the Backup's metadata through the worker that `_ready_store` started (its
        repository opened while the uploads ran), or one started now: None while it runs."""
        made = self._repository_job(obj, chores_file=CHORES_FILE)
        if isinstance(made, Failed):
            return made
        work = (CHORES_FILE, Chores(store=document))
        return self.jobs.handed(self.job_id(obj, "store"), *made, work, ChoresResult, tag(obj))

    def _ready_store(self, obj: Backup) -> None:
        """Start the worker that will store the Backup's metadata: it opens the repository
        now and waits for its chores."""
        made = self._repository_job(obj, chores_file=CHORES_FILE)
        if not isinstance(made, Failed):
            self.jobs.start(self.job_id(obj, "store"), *made)

    def reconcile(self, obj: Backup) -> Result:
        """One step of the backup."""
        phase = obj.status.phase
        if deleting(obj):
            return self._drop_data(obj)
        if phase in ENDED_PHASES:
            return self._expire(obj)
        if phase is None and obj.metadata.annotations.get(SYNCED_FROM):
            return self._adopt(obj)
        if phase is None or phase == BackupPhase.NEW:
            return self._start(obj)
        return self._follow(obj)

    def _selected(self, obj: Backup, taken: Taken) -> list[VirtualMachine]:
        if not taken.vms:
            return []
        spec = obj.spec
        chosen = [
            vm
            for vm in self.client.list(VirtualMachine)
            if spec.namespace_taken(vm.metadata.namespace or "default")
            and spec.labels_match(vm.metadata.labels)
        ]
        return sorted(chosen, key=lambda v: (v.metadata.namespace or "", v.metadata.name or ""))

    def _hosted(self, obj: Backup, taken: Taken) -> list[HostedMachine]:
        """The hypervisor's VMs (a cluster's KubeVirt) the filters take."""
        if not taken.vms or self.points is None:
            return []
        spec = obj.spec
        chosen = [
            vm
            for vm in self.points.machines()
            if spec.namespace_taken(vm.namespace) and spec.labels_match(vm.labels)
        ]
        return sorted(chosen, key=lambda v: (v.namespace, v.name))

    def _location(self, obj: Backup) -> tuple[Backup, BackupStorageLocation] | list[str]:
        """The Backup (the namespace's default location written into its spec when it names
        none) and its location, or why there is none to use."""
        namespace = obj.metadata.namespace or "default"
        name = obj.spec.storage_location
        if name is None:
            defaults = [
                b for b in self.client.list(BackupStorageLocation, namespace) if b.spec.default
            ]
            if not defaults:
                return [
                    f"spec.storageLocation is not set and no BackupStorageLocation of the "
                    f"namespace {namespace} is default: true"
                ]
            name = min(b.metadata.name or "" for b in defaults)
            spec = obj.spec.model_copy(update={"storage_location": name})
            obj = self.client.update(obj.model_copy(update={"spec": spec}))
            self.client.event(
                obj,
                "Normal",
                "DefaultStorageLocation",
                f"spec.storageLocation set to {name}, the namespace's default location",
            )
        bsl = self.client.get(BackupStorageLocation, namespace, name)
        if bsl is None:
            return [f"the BackupStorageLocation {name} does not exist in the namespace {namespace}"]
        if bsl.spec.access_mode == "ReadOnly":
            return [f"the BackupStorageLocation {name} is ReadOnly: no backup is written into it"]
        return obj, bsl

    def _invalid(self, obj: Backup, errors: list[str]) -> Result:
        message = "; ".join(errors)
        status = {
            "phase": BackupPhase.FAILED_VALIDATION.value,
            "validationErrors": errors,
            "message": message,
            "completionTimestamp": rfc3339(self.clock.now()),
            "observedGeneration": obj.metadata.generation,
        }
        self.client.event(obj, "Warning", BackupPhase.FAILED_VALIDATION.value, message)
        self.client.patch_status(obj, status)
        return Result.done()

    def _start(self, obj: Backup) -> Result:
        errors = obj.spec.filter_errors()
        found = self._location(obj)
        if isinstance(found, list) or errors:
            return self._invalid(obj, errors + (found if isinstance(found, list) else []))
        obj, bsl = found
        location = obj.spec.storage_location
        if not available(bsl):
            message = f"waiting for the BackupStorageLocation {location} to be Available"
            if obj.status.message != message:
                self.client.patch_status(obj, {"phase": BackupPhase.NEW.value, "message": message})
            return Result.requeue(2.0)
        taken = backup_taken(obj.spec)
        volumes: list[dict[str, Any]] = []
        vms = self._selected(obj, taken)
        for vm in vms:
            volumes += self._plan(obj, vm, taken)
        hosted = self._hosted(obj, taken)
        for machine in hosted:
            volumes += self._plan_hosted(obj, machine)
        picked = [(v.metadata.namespace or "default", v.metadata.name or "") for v in vms]
        picked += [(m.namespace, m.name) for m in hosted]
        now = self.clock.now()
        expires = now + timedelta(seconds=ttl_seconds(obj))
        message = f"backing up {len(picked)} VirtualMachines" if taken.vms else NO_VMS
        status: dict[str, Any] = {
            "phase": BackupPhase.IN_PROGRESS.value,
            "message": message,
            "startTimestamp": rfc3339(now),
            "expiration": rfc3339(expires),
            "virtualMachines": [{"namespace": ns, "name": name} for ns, name in picked],
            "volumes": volumes,
            "progress": {"totalItems": len(picked), "itemsBackedUp": 0, "itemsFailed": 0},
            "observedGeneration": obj.metadata.generation,
        }
        obj = held(self.client, obj)
        for entry in volumes:
            if entry["action"] == "skip":
                vm = f"{entry['namespace']}/{entry['virtualMachine']}"
                where = f"{entry['kind']} {entry['name']} of VirtualMachine {vm}"
                self.client.event(obj, "Normal", "VolumeSkipped", f"{where}: {entry['reason']}")
        if taken.vms:
            self.client.event(obj, "Normal", "InProgress", message)
        else:
            self.client.event(obj, "Warning", "NothingSelected", message)
        obj = self.client.patch_status(obj, status)
        self._ready_store(obj)
        return Result.requeue(POLL_SECONDS)

    def _plan(self, obj: Backup, vm: VirtualMachine, taken: Taken) -> list[dict[str, Any]]:
        """Each block device of `vm` and what becomes of it; the VM's DataUpload made when a
        disk's data moves and none is missing."""
        namespace, name = vm.metadata.namespace or "default", vm.metadata.name or ""
        volumes: list[dict[str, Any]] = []
        moved: list[str] = []
        missing: list[str] = []
        for ref in vm.spec.block_device_refs:
            kind = ref.kind.value
            cluster_wide = ref.kind is BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE
            found = self.client.get(
                DEVICE_MODELS[ref.kind], None if cluster_wide else namespace, ref.name
            )
            decision = decide(
                obj.spec.volume_policy, kind, None if found is None else found.to_json()
            )
            action, reason = decision.action, decision.reason
            if ref.kind is BlockDeviceKind.VIRTUAL_DISK and not taken.disks:
                action, reason = "skip", DISKS_LEFT_OUT
            elif action == "backup" and obj.spec.snapshot_volumes is False:
                action, reason = "skip", NO_DATA
            entry = {
                "virtualMachine": name,
                "namespace": namespace,
                "kind": kind,
                "name": ref.name,
                "action": action,
                "phase": "Pending" if action == "backup" else "Skipped",
                "reason": reason,
            }
            if action == "backup" and found is None:
                entry["phase"] = "Failed"
                entry["reason"] = f"the {kind} {namespace}/{ref.name} does not exist"
                missing.append(ref.name)
            elif action == "backup":
                entry["dataUpload"] = upload_name(obj, namespace, name)
                moved.append(ref.name)
            volumes.append(entry)
        if missing:
            for entry in volumes:
                if entry["phase"] == "Pending":
                    entry["phase"] = "Failed"
                    entry["reason"] = f"not backed up: the VM misses {', '.join(missing)}"
                    entry.pop("dataUpload", None)
        elif moved:
            self._upload(obj, namespace, name, vm.metadata.labels, moved)
        return volumes

    def _plan_hosted(self, obj: Backup, machine: HostedMachine) -> list[dict[str, Any]]:
        """Each claim of the hypervisor's VM and what becomes of it: its data moved by the VM's
        DataUpload, unless snapshotVolumes is false."""
        moved = obj.spec.snapshot_volumes is not False
        upload = upload_name(obj, machine.namespace, machine.name)
        volumes = []
        for volume, claim in machine.claims.items():
            entry = {
                "virtualMachine": machine.name,
                "namespace": machine.namespace,
                "kind": CLAIM_KIND,
                "name": claim,
                "action": "backup",
                "phase": "Pending",
                "reason": f"the claim of the KubeVirt VM's volume {volume}",
                "dataUpload": upload,
            }
            if not moved:
                entry.update(action="skip", phase="Skipped", reason=NO_DATA)
                del entry["dataUpload"]
            volumes.append(entry)
        if moved and volumes:
            claims = list(machine.claims.values())
            self._upload(obj, machine.namespace, machine.name, machine.labels, claims)
        return volumes

    def _adopt(self, obj: Backup) -> Result:
        """Take the status of a Backup the location's sync made from the repository's
        metadata; one whose metadata is gone is Failed, saying so."""
        name = metadata_name(obj.metadata.namespace or "default", obj.metadata.name or "")
        read = self._chore(obj, "read", Chores(read=[name]))
        if read is None:
            return Result.requeue(JOB_POLL_SECONDS)
        if isinstance(read, Failed):
            return self._end(
                obj, BackupPhase.FAILED, f"its metadata cannot be read: {read.message}", {}
            )
        document = metadata_read(read).documents.get(name)
        stored = (document or {}).get("status")
        if not stored:
            return self._end(obj, BackupPhase.FAILED, "the repository holds no status of it", {})
        obj = held(self.client, obj)
        self.client.patch_status(obj, {**stored, "observedGeneration": obj.metadata.generation})
        return Result.requeue(0)

    def _expire(self, obj: Backup) -> Result:
        """Delete the ended Backup once its expiration passed; else look again by then."""
        if obj.status.expiration is None:
            return Result.done()
        left = (obj.status.expiration - self.clock.now()).total_seconds()
        if left > 0:
            return Result.requeue(min(left, EXPIRY_POLL_SECONDS))
        self.client.event(
            obj,
            "Normal",
            "Expired",
            f"the ttl {obj.spec.ttl or DEFAULT_TTL} ran out at "
            f"{rfc3339(obj.status.expiration)}: deleting the Backup",
        )
        self.client.delete(Backup, obj.metadata.namespace, obj.metadata.name or "")
        return Result.done()

    def _drop_data(self, obj: Backup) -> Result:
        """Stop the deleted Backup's running DataUploads, forget its snapshots and metadata,
        prune, then let it go."""
        if FINALIZER not in obj.metadata.finalizers:
            return Result.done()
        if obj.status.phase != BackupPhase.DELETING:
            obj = self.client.patch_status(obj, {"phase": BackupPhase.DELETING.value})
        namespace, name = obj.metadata.namespace or "default", obj.metadata.name or ""
        location_name = obj.spec.storage_location or ""
        bsl = self.client.get(BackupStorageLocation, namespace, location_name)
        if bsl is None:
            self.client.event(
                obj,
                "Warning",
                "DataKept",
                f"the BackupStorageLocation {location_name} is gone:"
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
        if not all([self.jobs.stop(self.job_id(obj, chore)) for chore in ("store", "read")]):
            return Result.requeue(POLL_SECONDS)
        made = {d.snapshot_id for u in uploads for d in u.status.disks}
        snapshots = sorted(made.union(backup_snapshots(obj)))
        forgetting = let_go(snapshots, {metadata_name(namespace, name): []})
        chores = Chores(forget=forgetting, prune="always" if snapshots else "never")
        dropped = self._chore(obj, "drop", chores, wait=True)
        if dropped is None:
            return Result.requeue(JOB_POLL_SECONDS)
        if isinstance(dropped, Failed):
            self.client.event(
                obj, "Warning", "DataKept", f"the repository cannot be opened: {dropped.message}"
            )
            return Result.requeue(EXPIRY_POLL_SECONDS)
        pruned = dropped.result.pruned
        freed = f"; {freed_text(pruned)}" if pruned is not None else ""
        self.client.event(
            obj, "Normal", "DataDeleted", f"{len(snapshots)} snapshots forgotten{freed}"
        )
        release(self.client, obj)
        return Result.done()

    def _upload(
        self, obj: Backup, namespace: str, vm: str, labels: dict[str, str], disks: list[str]
    ) -> None:
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
        hooks = backup_hooks(obj, namespace, labels)
        if hooks:
            meta.annotations[HOOKS] = json.dumps(hooks)
        spec: dict[str, Any] = {
            "backupStorageLocation": obj.spec.storage_location,
            "sourceNamespace": namespace,
        }
        timeout = positive(obj.spec.item_operation_timeout)
        if timeout is not None:
            spec["operationTimeout"] = timeout
        self.client.create(
            DataUpload.model_validate(
                {
                    "apiVersion": API_VERSION,
                    "kind": "DataUpload",
                    "metadata": meta.to_json(),
                    "spec": spec,
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
        vms = {(m.namespace, m.name): True for m in obj.status.virtual_machines}
        done = True
        operations = {"attempted": 0, "completed": 0, "failed": 0}
        counted: set[str] = set()
        for entry in volumes:
            key = (entry["namespace"], entry["virtualMachine"])
            vms.setdefault(key, True)
            if entry["action"] != "backup":
                continue
            if entry.get("dataUpload") is None:
                vms[key] = False
                continue
            upload = uploads.get(entry["dataUpload"])
            first = entry["dataUpload"] not in counted
            counted.add(entry["dataUpload"])
            operations["attempted"] += first
            if upload is None:  # made before the status named it: it was deleted since
                entry["phase"] = "Failed"
                entry["reason"] = f"DataUpload {entry['dataUpload']} was deleted"
                operations["failed"] += first
                vms[key] = False
                continue
            phase = upload.status.phase
            if phase not in ENDED:
                done = False
                entry["phase"] = "InProgress"
                continue
            entry["phase"] = "Completed" if phase == "Completed" else "Failed"
            if phase == "Completed":
                operations["completed"] += first
                snaps = {d.name: d.snapshot_id for d in upload.status.disks}
                entry["snapshotID"] = snaps.get(entry["name"])
            else:
                operations["failed"] += first
                entry["reason"] = (
                    f"DataUpload {upload.metadata.name} {phase}: {upload.status.message}"
                )
                vms[key] = False
        ok = sum(1 for good in vms.values() if good)
        made = [uploads[name] for name in sorted(counted) if name in uploads]
        ran = [hook for upload in made for hook in upload.status.hooks]
        fields: dict[str, Any] = {
            "volumes": volumes,
            "progress": {
                "totalItems": len(vms),
                "itemsBackedUp": ok if done else 0,
                "itemsFailed": len(vms) - ok,
            },
            "backupItemOperationsAttempted": operations["attempted"],
            "backupItemOperationsCompleted": operations["completed"],
            "backupItemOperationsFailed": operations["failed"],
        }
        if ran:
            failed_hooks = sum(1 for h in ran if h.failed)
            fields["hookStatus"] = {"hooksAttempted": len(ran), "hooksFailed": failed_hooks}
        if not done:
            fields["phase"] = BackupPhase.WAITING_FOR_PLUGIN_OPERATIONS.value
            current = obj.status.to_json()
            if any(current.get(key) != value for key, value in fields.items()):
                self.client.patch_status(obj, fields)
            return Result.requeue(POLL_SECONDS)
        taken = backup_taken(obj.spec)
        completed = [u for name in counted if (u := uploads.get(name))]
        fields["warnings"] = sum(
            1
            for u in completed
            if u.status.phase == "Completed"
            for h in u.status.hooks
            if h.failed
        )
        if not taken.vms:
            phase, message = BackupPhase.COMPLETED, NO_VMS
            fields["warnings"] += 1
        elif vms and ok == 0:
            phase, message = BackupPhase.FAILED, "no VirtualMachine was backed up"
        elif ok < len(vms):
            phase, message = (
                BackupPhase.PARTIALLY_FAILED,
                f"{len(vms) - ok} of {len(vms)} VirtualMachines failed",
            )
        else:
            phase, message = BackupPhase.COMPLETED, f"{ok} VirtualMachines backed up"
        fields["errors"] = len(vms) - ok
        status = {**obj.status.to_json(), **fields, "phase": phase.value, "message": message}
        status["completionTimestamp"] = rfc3339(self.clock.now())
        hosted = self.points.machines() if self.points is not None else []
        document = backup_document(self.client, obj, taken, volumes, vms, status, hosted)
        stored = self._store(obj, document)
        if stored is None:
            return Result.requeue(JOB_POLL_SECONDS)
        if isinstance(stored, Failed):
            why = f"the manifests could not be stored: {stored.message}"
            return self._end(obj, BackupPhase.FAILED, why, fields)
        return self._end(obj, phase, message, fields)

    def _end(self, obj: Backup, phase: BackupPhase, message: str, fields: dict[str, Any]) -> Result:
        status = {
            **fields,
            "phase": phase.value,
            "message": message,
            "completionTimestamp": rfc3339(self.clock.now()),
        }
        if phase == BackupPhase.FAILED:
            status["failureReason"] = message
        self.client.event(
            obj, "Normal" if phase == BackupPhase.COMPLETED else "Warning", phase.value, message
        )
        self.client.patch_status(obj, status)
        return Result.done()
