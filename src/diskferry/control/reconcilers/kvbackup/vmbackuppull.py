"""A Pull VirtualMachineBackup: its VM's disks checkpointed in one backup session and served
(map and data endpoints) by a backup-point worker until `ttlDuration` from its creation; then
the session ends, the checkpoint goes into the tracker, and the backup is Complete.

The worker is an export server on 127.0.0.1 with a port of its own (kept in an annotation, as a
VirtualMachineExport's), the daemon's short-lived certificate and the token of
`spec.tokenSecretRef` (or one made for it, `backup-token-<name>`). As KubeVirt does, the backup
makes a VirtualMachineExport of itself (`vmbackupexport`), which routes the export proxy to the
worker and lists the endpoints; the backup is Ready once its export is, with the export's uid
in `status.exportUID`, and deletes it at its end. The checkpoint it starts from is the
tracker's latest; a running VM's guest is frozen around the checkpoint through its agent
unless `skipQuiesce`. A VM whose disks have no CBT fails at once, naming the label that turns
it on.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from diskferry.control.clock import Clock, rfc3339
from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.machines import Machines
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.servers import loopback, recorded_port
from diskferry.control.host.volumes import Volumes
from diskferry.control.reconcilers.datamover.dataupload import CBT_OFF, vm_claims
from diskferry.control.reconcilers.datamover.moverlife import Waiting
from diskferry.control.reconcilers.disks.importjob import Imports
from diskferry.control.reconcilers.exports.exportbackup import POINT_FILE, point_job_id
from diskferry.control.reconcilers.exports.exporttoken import Token, export_token
from diskferry.control.reconcilers.exports.vmexport import (
    HOST,
    LINKS_FILE,
    PORT_ANNOTATION,
    TOKEN_FILE,
    answers,
    start_server,
    stop_server,
)
from diskferry.control.reconcilers.kvbackup.vmbackupexport import backup_export, drop_backup_export
from diskferry.control.reconcilers.kvbackup.vmbackupstate import (
    BackupFailure,
    Source,
    advance,
    move,
    quiesced,
)
from diskferry.control.reconcilers.vms import vmcbt
from diskferry.control.reconcilers.vms.quiesce import agent_silence
from diskferry.control.resources.model import Reason
from diskferry.control.resources.virtualmachine import MachinePhase
from diskferry.control.resources.vmbackup import BackupPhase, VirtualMachineBackup
from diskferry.control.resources.vmexport import ExportPhase
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.export import BackupPointJob

POLL_SECONDS = 1.0
CHECK_SECONDS = 5.0
WAIT_SECONDS = 2.0
TTL_EXPIRED = Reason("TTLExpired")
POINT_FAILED = Reason("BackupPointFailed")


def backup_link(side: dict[str, Any]) -> dict[str, Any]:
    """One side of the export server's links in the backup's shape: the CA and, per volume,
    its data and map endpoints."""
    volumes = []
    for backup in side.get("backups") or []:
        urls = {e["endpoint"]: e["url"] for e in backup["endpoints"]}
        volumes.append(
            {"volumeName": backup["name"], "dataEndpoint": urls["data"], "mapEndpoint": urls["map"]}
        )
    return {"cert": side["cert"], "volumes": volumes}


class PullBackup:
    """Serves a Pull backup's point through a backup-point worker until its TTL."""

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        machines: Machines,
        certs: ServerCerts,
        proxy: ExportProxy,
        clock: Clock,
    ) -> None:
        self.client = client
        self.runner = runner
        self.volumes = volumes
        self.machines = machines
        self.certs = certs
        self.proxy = proxy
        self.clock = clock
        self.imports = Imports(runner)

    def job_id(self, obj: VirtualMachineBackup) -> str:
        """The id of the backup's point worker."""
        return point_job_id(obj)

    def _route(self, obj: VirtualMachineBackup) -> tuple[str, str]:
        """The backup's way through the proxy: its export's, named as the backup."""
        return obj.metadata.namespace or "", obj.metadata.name or ""

    def expires(self, obj: VirtualMachineBackup) -> datetime:
        """When the point stops being served: the backup's creation plus its TTL."""
        created = obj.metadata.creation_timestamp or self.clock.now()
        return created + obj.spec.ttl

    def unserve(self, obj: VirtualMachineBackup) -> bool:
        """Delete the backup's export and stop the worker (its last lines to the daemon's log
        when it failed); False while it still runs."""
        drop_backup_export(self.client, obj)
        job_id = self.job_id(obj)
        state = self.runner.state(job_id)
        if state is not None and state.failed:
            self.imports.finish(job_id, tag(obj), keep=False)
        return stop_server(self, job_id)

    def step(self, obj: VirtualMachineBackup, source: Source) -> Result:
        """Start the point, follow it while it is served, and complete it at its end."""
        state = self.runner.state(self.job_id(obj))
        if state is None:
            return self._start(obj, source)
        if not state.running:
            result = state.result or {}
            if state.succeeded and result.get("ended") == "expired":
                return self._complete(obj, source, result)
            reason = str(result.get("reason") or POINT_FAILED)
            tail = self.runner.log_tail(state.job_id, 1)
            message = result.get("message") or (tail[-1] if tail else "the worker ended")
            raise BackupFailure(str(message), reason=reason)
        return self._follow(obj)

    def _waiting(self, obj: VirtualMachineBackup, message: str) -> Result:
        move(self.client, obj, BackupPhase.PENDING, "Initializing", message)
        return Result.requeue(WAIT_SECONDS)

    def _start(self, obj: VirtualMachineBackup, source: Source) -> Result:
        left = (self.expires(obj) - self.clock.now()).total_seconds()
        if left <= 0:
            raise BackupFailure(
                "the TTL ended before the backup point was served", reason=TTL_EXPIRED
            )
        namespace = obj.metadata.namespace or ""
        claims = vm_claims(self.client, self.volumes, namespace, source.vm, None)
        if isinstance(claims, Waiting):
            return self._waiting(obj, claims.message)
        if not all(self.volumes.tracked(c) for c in claims.values()):
            message = f"{vmcbt.off_reason(self.client, source.vm)}; a Pull backup needs it"
            raise BackupFailure(message, reason=CBT_OFF)
        token = export_token(self.client, obj)
        if isinstance(token, str):
            return self._waiting(obj, token)
        status = source.vm.status
        job: dict[str, Any] = {}
        if status.phase is MachinePhase.RUNNING:
            sockets = self.machines.sockets(source.vm)
            job["qmp"], agent = sockets.qmp, sockets.agent
            if not obj.spec.skip_quiesce and agent_silence(self.machines, source.vm) is None:
                job["qga"] = agent
        obj, port = recorded_port(self.client, obj)
        disks = [{"name": name, "path": str(c.file)} for name, c in claims.items()]
        self._run(obj, source, token, port, left, disks, job)
        since = f" since checkpoint {source.since}" if source.since else ""
        message = f"checkpointing VirtualMachine {source.name}{since}"
        fields = {"tokenSecretRef": token.secret_name}
        move(self.client, obj, BackupPhase.PROGRESSING, "Initiated", message, fields)
        return Result.requeue(POLL_SECONDS)

    def _run(
        self,
        obj: VirtualMachineBackup,
        source: Source,
        token: Token,
        port: int,
        left: float,
        disks: list[dict[str, str]],
        extra: dict[str, Any],
    ) -> None:
        fields = {
            **extra,
            "name": obj.metadata.name,
            "volumes": disks,
            "chain": source.chain,
            "since": source.since,
            "point_file": POINT_FILE,
        }
        route = self._route(obj)
        start_server(
            self, self.job_id(obj), route, loopback(port), left, token, BackupPointJob, fields
        )

    def _read(self, obj: VirtualMachineBackup, name: str) -> dict[str, Any] | None:
        text = self.runner.read_file(self.job_id(obj), name)
        return None if text is None else json.loads(text)

    def _follow(self, obj: VirtualMachineBackup) -> Result:
        job_id = self.job_id(obj)
        token = export_token(self.client, obj)
        if not isinstance(token, str) and self.runner.read_file(job_id, TOKEN_FILE) != token.value:
            self.runner.write_file(job_id, TOKEN_FILE, token.value)
        self.certs.renew(self.runner, job_id, [HOST])
        port = int(obj.metadata.annotations.get(PORT_ANNOTATION, "0"))
        point, links = self._read(obj, POINT_FILE), self._read(obj, LINKS_FILE)
        if point is None or links is None or not answers(port, self.certs.ca_pem()):
            message = "the backup point is being checkpointed and its server started"
            move(self.client, obj, BackupPhase.PROGRESSING, "PreparingExport", message)
            return Result.requeue(POLL_SECONDS)
        if not any(c.type == "Quiesced" for c in obj.status.conditions):
            conditions = quiesced(obj, obj.spec.skip_quiesce, point.get("consistency"))
            obj = self.client.patch_status(obj, {"conditions": conditions})
        left = (self.expires(obj) - self.clock.now()).total_seconds()
        if left <= 0:  # the worker drains and ends now; its end completes the backup
            return Result.requeue(POLL_SECONDS)
        export = backup_export(self.client, obj, obj.token_secret_name, left)
        if isinstance(export, str) or export.status.phase != ExportPhase.READY:
            message = (
                export
                if isinstance(export, str)
                else (f"waiting for the VirtualMachineExport {export.metadata.name} to be Ready")
            )
            move(self.client, obj, BackupPhase.PROGRESSING, "ExportInitiated", message)
            return Result.requeue(POLL_SECONDS)
        internal, external = backup_link(links["internal"]), backup_link(links["external"])
        fields = {
            "type": point["type"],
            "checkpointName": point["disks"][0]["checkpoint"],
            "endpointCert": external["cert"],
            "includedVolumes": external["volumes"],
            "links": {"internal": internal, "external": external},
            "exportUID": export.metadata.uid,
        }
        until = rfc3339(self.expires(obj))
        message = (
            f"serving the backup point on https://{HOST}:{port} and through the "
            f"VirtualMachineExport {export.metadata.name} until {until}"
        )
        move(self.client, obj, BackupPhase.READY, "ExportReady", message, fields)
        renewal = self.certs.seconds_to_renewal(self.runner, job_id)
        return Result.requeue(max(min(CHECK_SECONDS, left, renewal), POLL_SECONDS / 10))

    def _complete(
        self, obj: VirtualMachineBackup, source: Source, result: dict[str, Any]
    ) -> Result:
        """Record the checkpoint and Complete while the job's result is still there, then stop
        serving: a daemon killed in between finds the backup ended and stops it then."""
        disks = result.get("disks") or []
        checkpoint = disks[0]["checkpoint"] if disks else None
        volumes = [d["name"] for d in disks]
        advance(self.client, obj, source, checkpoint, volumes, self.clock.now())
        targets = source.targets()
        fields = {
            "type": result.get("type"),
            "checkpointName": checkpoint,
            "includedVolumes": [
                {"volumeName": v, **({"diskTarget": targets[v]} if v in targets else {})}
                for v in volumes
            ],
            "links": None,
        }
        message = "the TTL ended: the backup point is no longer served"
        obj = move(self.client, obj, BackupPhase.COMPLETE, "Completed", message, fields)
        return Result.done() if self.unserve(obj) else Result.requeue(POLL_SECONDS / 3)
