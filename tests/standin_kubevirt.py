"""The stand-in cluster's KubeVirt, for backups: it answers each Pull VirtualMachineBackup
(backup.kubevirt.io/v1alpha1) as KubeVirt's backup controller does, with a real backup point.

- The backup's VM (kubevirt.io/v1 VirtualMachine: the backup's source, or its
  VirtualMachineBackupTracker's) has for disks its volumes' claims
  (`persistentVolumeClaim.claimName`, or a `dataVolume`'s claim of its name), each a file of the
  stand-in storage: `disk.img` in a Filesystem volume's directory, or a Block volume's file.
  Changed-block tracking is turned on for each at the first backup (a qcow2 overlay beside
  the disk, as KubeVirt keeps one on the VM's state claim), and the VM's
  `status.changedBlockTracking` says Enabled.
- The disks are checkpointed and served by diskferry's backup-point worker (the one the
  embedded Pull backup runs): each volume's `map` and `data` endpoints on 127.0.0.1, behind the
  token of the Secret `spec.tokenSecretRef` (key `token`), over TLS from a CA of the stand-in's
  whose certificate is `status.endpointCert`. The point is incremental from the tracker's
  latest checkpoint unless `forceFullBackup` (a disk without that checkpoint is served whole).
- Status as KubeVirt writes it: conditions Progressing (Initializing while the VM, its claims
  or the token are missing; Initiated; ExportReady once the endpoints answer), Complete,
  Failed; `type`, `checkpointName`, `startTimestamp`, `includedVolumes` (volumeName,
  dataEndpoint, mapEndpoint, type), and the finalizer `backup.kubevirt.io/vmbackup-protection`
  while the point lives.
- A point ends when its backup is deleted or at its TTL (`ttlDuration` from its creation, 2h
  when unset), as KubeVirt ends the pull job it aborts then: the checkpoint made at its start
  goes into the tracker's `status.latestCheckpoint`, the backup is Complete, and a deleted one
  goes once its finalizer is removed.

Push backups are left alone. The workers run on the stand-in's host under DATA_DIR/kubevirt,
and are stopped with the stand-in.
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from standin_loop import Loop, kind
from standin_storage import MERGE, backing, block

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.clock import rfc3339
from diskferry.control.errors import ApiError, NotFoundError
from diskferry.control.host.embedded.certs import DaemonCa
from diskferry.control.resources.duration import parse_duration
from diskferry.control.runtime.progress import job_details
from diskferry.control.runtime.runner.base import JobFile
from diskferry.control.runtime.runner.local import LocalRunner

log = logging.getLogger("standin.kubevirt")
BACKUP_GROUP = "backup.kubevirt.io"
FINALIZER = "backup.kubevirt.io/vmbackup-protection"
HOST = "127.0.0.1"
TOKEN_FILE = "token"
POINT_FILE = "point.json"
DEFAULT_TTL = timedelta(hours=2)
DRAIN_SECONDS = 5.0
STOP_SECONDS = 30.0
Obj = dict[str, Any]


class NotYet(Exception):
    """The backup waits for something (its message) before its point can be made."""


def _condition(obj: Obj, kind_: str) -> Obj:
    for found in (obj.get("status") or {}).get("conditions") or []:
        if found.get("type") == kind_:
            return found
    return {}


def _created(obj: Obj) -> datetime:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def _ended(obj: Obj) -> bool:
    return any(_condition(obj, c).get("status") == "True" for c in ("Complete", "Failed"))


def _conditions(obj: Obj, *changed: tuple[str, str, str, str]) -> list[Obj]:
    """The backup's conditions with each (type, status, reason, message) of `changed` set."""
    now = rfc3339(datetime.now(UTC))
    kept = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
    for type_, status, reason, message in changed:
        before = kept.get(type_) or {}
        since = before.get("lastTransitionTime") if before.get("status") == status else now
        kept[type_] = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since,
        }
    return list(kept.values())


class KubeVirt:
    """Answers Pull VirtualMachineBackups with backup points served from DATA_DIR/kubevirt."""

    def __init__(self, service: ObjectService, data_dir: Path) -> None:
        self.service = service
        root = data_dir / "kubevirt"
        self.runner = LocalRunner(root)
        self.ca = DaemonCa(root / "pki")
        self.backups = kind(service, "VirtualMachineBackup", BACKUP_GROUP)
        self.trackers = kind(service, "VirtualMachineBackupTracker", BACKUP_GROUP)
        self.machines = kind(service, "VirtualMachine", "kubevirt.io")
        self.claims = kind(service, "PersistentVolumeClaim")
        self.volumes = kind(service, "PersistentVolume")
        self.secrets = kind(service, "Secret")
        self.loop = Loop(service, "standin-kubevirt", self.sync)

    def start(self) -> None:
        """Begin answering backups."""
        self.loop.start()

    def stop(self) -> None:
        """Stop answering, and every point served."""
        self.loop.stop()
        self.runner.stop_all(STOP_SECONDS)

    def sync(self) -> None:
        """One step for every Pull backup."""
        for backup in self.service.list(self.backups, None).items:
            if (backup.get("spec") or {}).get("mode") != "Pull":
                continue
            try:
                self._backup(backup)
            except ApiError as e:  # changed meanwhile: the next sync takes it as it is then
                log.info("backup %s: %s", backup["metadata"]["name"], e.message)

    def _job_id(self, backup: Obj) -> str:
        return f"vmbackup-{backup['metadata']['uid']}"

    def _backup(self, backup: Obj) -> None:
        meta = backup["metadata"]
        deleting = bool(meta.get("deletionTimestamp"))
        job_id = self._job_id(backup)
        state = self.runner.state(job_id)
        if _ended(backup):
            if state is not None and not state.running:
                self.runner.purge(job_id, keep_scratch=False)
            if deleting:
                self._finalizer(backup, present=False)
            return
        if state is None:
            if deleting:
                self._finalizer(backup, present=False)
                return
            try:
                self._start(backup)
            except NotYet as waiting:
                changed = ("Progressing", "False", "Initializing", str(waiting))
                self._status(backup, {"conditions": _conditions(backup, changed)})
            return
        if state.running:
            if deleting or datetime.now(UTC) >= _created(backup) + self._ttl(backup):
                self.runner.cancel(job_id)  # the worker ends the point as at its TTL
                return
            self._serving(backup, job_id)
            return
        self._end(backup, state.result or {}, deleting)

    def _ttl(self, backup: Obj) -> timedelta:
        given = (backup.get("spec") or {}).get("ttlDuration")
        return parse_duration(given) if given else DEFAULT_TTL

    def _get(self, info: Any, namespace: str, name: str) -> Obj | None:
        try:
            return self.service.get(info, namespace, name)
        except NotFoundError:
            return None

    def _tracker(self, backup: Obj) -> Obj | None:
        """The backup's tracker, None when it names none or it is missing."""
        source = backup["spec"]["source"]
        if source.get("kind") != "VirtualMachineBackupTracker":
            return None
        return self._get(self.trackers, backup["metadata"]["namespace"], source["name"])

    def _source(self, backup: Obj) -> tuple[Obj, Obj | None]:
        """The backup's VM and tracker (None when it names the VM itself)."""
        namespace = backup["metadata"]["namespace"]
        source = backup["spec"]["source"]
        name = source["name"]
        tracker = self._tracker(backup)
        if source.get("kind") == "VirtualMachineBackupTracker":
            if tracker is None:
                raise NotYet(f"BackupTracker {name} does not exist")
            name = tracker["spec"]["source"]["name"]
        vm = self._get(self.machines, namespace, name)
        if vm is None:
            raise NotYet(f"VM {namespace}/{name} doesnt exist")
        return vm, tracker

    def _disk(self, namespace: str, volume: str, claim: str) -> str:
        """The file of the disk the bound claim `claim` holds."""
        pvc = self._get(self.claims, namespace, claim)
        pv = None
        if pvc is not None and (pvc.get("status") or {}).get("phase") == "Bound":
            pv = self._get(self.volumes, "", pvc["spec"]["volumeName"])
        path = None if pv is None else backing(pv)
        if pv is None or path is None:
            raise NotYet(f"the claim {claim} of volume {volume} is not bound")
        return str(path if block(pv) else path / "disk.img")

    def _disks(self, vm: Obj) -> dict[str, str]:
        """Each volume of the VM that a claim backs, and the file of its disk."""
        namespace = vm["metadata"]["namespace"]
        spec = ((vm.get("spec") or {}).get("template") or {}).get("spec") or {}
        disks = {}
        for volume in spec.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName") or (
                volume.get("dataVolume") or {}
            ).get("name")
            if claim:
                disks[volume["name"]] = self._disk(namespace, volume["name"], claim)
        if not disks:
            raise NotYet(f"vm {vm['metadata']['name']} has no volumes to backup")
        return disks

    def _token(self, backup: Obj) -> bytes:
        name = (backup.get("spec") or {}).get("tokenSecretRef")
        secret = self._get(self.secrets, backup["metadata"]["namespace"], name or "")
        value = ((secret or {}).get("data") or {}).get("token")
        if not value:
            raise NotYet(f"the Secret {name} with the key token does not exist")
        return base64.b64decode(value)

    def _start(self, backup: Obj) -> None:
        # the stand-in starts without the export engine and QEMU's tools: a backup loads them
        from diskferry.export import BackupPointJob
        from diskferry.qemu import cbt

        vm, tracker = self._source(backup)
        disks = self._disks(vm)
        token = self._token(backup)
        for path in disks.values():
            if not cbt.find(path).enabled:
                cbt.enable(path)
        self._tracking(vm)
        latest = ((tracker or {}).get("status") or {}).get("latestCheckpoint") or {}
        since = None if backup["spec"].get("forceFullBackup") else latest.get("name")
        chain = (tracker or backup)["metadata"]["uid"].replace("-", "")
        left = (_created(backup) + self._ttl(backup) - datetime.now(UTC)).total_seconds()
        job = BackupPointJob(
            name=backup["metadata"]["name"],
            volumes=[{"name": name, "path": path} for name, path in disks.items()],
            chain=chain,
            since=since,
            point_file=POINT_FILE,
            token_file=TOKEN_FILE,
            ttl=max(left, 1.0),
            grace=DRAIN_SECONDS,
            cert_dir=".",
            sans=[HOST],
            listen_address=HOST,
            listen_port=0,
        )
        self._finalizer(backup, present=True)
        files = [*self.ca.job_files([HOST]), JobFile(TOKEN_FILE, token, credential=True)]
        self.runner.start(self._job_id(backup), job, files)
        changed = ("Progressing", "True", "Initiated", "Backup is in progress")
        status = {
            "conditions": _conditions(backup, changed),
            "type": "Incremental" if since else "Full",
            "startTimestamp": backup["metadata"]["creationTimestamp"],
        }
        self._status(backup, status)

    def _tracking(self, vm: Obj) -> None:
        meta = vm["metadata"]
        enabled = {"changedBlockTracking": {"state": "Enabled"}}
        if ((vm.get("status") or {}).get("changedBlockTracking") or {}).get("state") != "Enabled":
            self.service.patch(
                self.machines,
                meta["namespace"],
                meta["name"],
                {"status": enabled},
                MERGE,
                subresource="status",
            )

    def _serving(self, backup: Obj, job_id: str) -> None:
        point = self.runner.read_file(job_id, POINT_FILE)
        port = job_details(self.runner.state(job_id)).get("listenPort")
        ready = _condition(backup, "Progressing").get("reason") == "ExportReady"
        if point is None or not port or ready:
            return
        made = json.loads(point)
        base = f"https://{HOST}:{port}/exports"
        volumes = [
            {
                "volumeName": disk["name"],
                "dataEndpoint": f"{base}/{disk['name']}/data",
                "mapEndpoint": f"{base}/{disk['name']}/map",
                "type": "Incremental" if disk["mode"] == "incremental" else "Full",
            }
            for disk in made["disks"]
        ]
        changed = ("Progressing", "True", "ExportReady", "Backup export is ready to pull")
        status = {
            "conditions": _conditions(backup, changed),
            "type": made["type"],
            "checkpointName": made["disks"][0]["checkpoint"],
            "endpointCert": self.ca.ca_pem().decode(),
            "includedVolumes": volumes,
        }
        self._status(backup, status)

    def _end(self, backup: Obj, result: Obj, deleting: bool) -> None:
        if not result.get("ok"):
            message = str(result.get("message") or "the backup point's worker failed")
            changed = [
                ("Progressing", "False", "Failed", message),
                ("Failed", "True", "Failed", message),
            ]
            self._status(backup, {"conditions": _conditions(backup, *changed)})
            return
        checkpoint = result["disks"][0]["checkpoint"]
        tracker = self._tracker(backup)
        if tracker is not None:
            latest = {
                "name": checkpoint,
                "creationTime": backup["metadata"]["creationTimestamp"],
                "volumes": [{"volumeName": d["name"]} for d in result["disks"]],
            }
            meta = tracker["metadata"]
            self.service.patch(
                self.trackers,
                meta["namespace"],
                meta["name"],
                {"status": {"latestCheckpoint": latest}},
                MERGE,
                subresource="status",
            )
        changed = [
            ("Progressing", "False", "Completed", "Successfully completed VirtualMachineBackup"),
            ("Complete", "True", "Completed", "Successfully completed VirtualMachineBackup"),
        ]
        self._status(
            backup, {"conditions": _conditions(backup, *changed), "checkpointName": checkpoint}
        )

    def _status(self, backup: Obj, status: Obj) -> None:
        meta = backup["metadata"]
        self.service.patch(
            self.backups,
            meta["namespace"],
            meta["name"],
            {"status": status},
            MERGE,
            subresource="status",
        )

    def _finalizer(self, backup: Obj, *, present: bool) -> None:
        meta = backup["metadata"]
        held = list(meta.get("finalizers") or [])
        if (FINALIZER in held) == present:
            return
        wanted = [*held, FINALIZER] if present else [f for f in held if f != FINALIZER]
        self.service.patch(
            self.backups,
            meta["namespace"],
            meta["name"],
            {"metadata": {"finalizers": wanted}},
            MERGE,
        )
