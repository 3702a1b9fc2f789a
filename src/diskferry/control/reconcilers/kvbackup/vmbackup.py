"""VirtualMachineBackup, as KubeVirt's backup API has it: the VM (named, or through its
VirtualMachineBackupTracker) backed up at one point, pushed into a repository or served to
be pulled; at the end the tracker's `latestCheckpoint` is the backup's checkpoint.

The backup is Incremental from the tracker's latest checkpoint unless `forceFullBackup`, the
source is the VM itself, or the tracker has none yet (the disks' chain decides further: a
disk whose checkpoint is gone is backed up whole). Phases beyond KubeVirt's conditions, to
print: Pending (waiting for the VM's disks, or a Push's location), Progressing, Ready (Pull:
the endpoints answer through the backup's VirtualMachineExport), Complete, Failed. The
conditions are KubeVirt's: Progressing, Complete, Failed, Quiesced. What Push and Pull do apart
lives in `vmbackuppush` and `vmbackuppull`.
"""

from __future__ import annotations

import logging

from diskferry.control.clock import Clock
from diskferry.control.host.certs import ServerCerts
from diskferry.control.host.machines import Machines
from diskferry.control.host.proxy import ExportProxy
from diskferry.control.host.volumes import Volumes
from diskferry.control.reconcilers.datamover.dataupload import VM_NOT_FOUND
from diskferry.control.reconcilers.datamover.moverlife import MoverFailure
from diskferry.control.reconcilers.kvbackup.vmbackuppull import PullBackup
from diskferry.control.reconcilers.kvbackup.vmbackuppush import PushBackup
from diskferry.control.reconcilers.kvbackup.vmbackupstate import BackupFailure, Source, move
from diskferry.control.resources.model import Reason
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.resources.vmbackup import (
    ENDED,
    VIRTUAL_MACHINE_BACKUPS,
    BackupMode,
    BackupPhase,
    VirtualMachineBackup,
)
from diskferry.control.resources.vmbackuptracker import (
    BackupSourceKind,
    VirtualMachineBackupTracker,
)
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting, held, release
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner

log = logging.getLogger("diskferry.control")
STOP_POLL = 0.3
TRACKER_NOT_FOUND = Reason("TrackerNotFound")


class VirtualMachineBackupReconciler:
    """Backs up each VirtualMachineBackup's VM, pushed or pulled, and advances its tracker."""

    info = VIRTUAL_MACHINE_BACKUPS

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        machines: Machines,
        certs: ServerCerts,
        proxy: ExportProxy,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.clock = clock or Clock()
        self.push = PushBackup(client, self.clock)
        self.pull = PullBackup(client, runner, volumes, machines, certs, proxy, self.clock)

    def job_id(self, obj: VirtualMachineBackup) -> str:
        """The id of the Pull backup's server job."""
        return self.pull.job_id(obj)

    def reconcile(self, obj: VirtualMachineBackup) -> Result:
        """One step of the backup's life."""
        if deleting(obj):
            if not self.pull.unserve(obj):
                return Result.requeue(STOP_POLL)
            release(self.client, obj)
            return Result.done()
        obj = held(self.client, obj)
        if obj.status.phase in ENDED:  # a Pull point still served stops now
            return Result.done() if self.pull.unserve(obj) else Result.requeue(STOP_POLL)
        try:
            source = self._source(obj)
            if obj.spec.mode == BackupMode.PUSH:
                return self.push.step(obj, source)
            return self.pull.step(obj, source)
        except (BackupFailure, MoverFailure) as e:
            return self.fail(obj, e.reason, e.message)

    def fail(self, obj: VirtualMachineBackup, reason: str, message: str) -> Result:
        """Failed, recorded first; then the Pull server (if any) is stopped."""
        log.warning("%s failed: %s: %s", tag(obj), reason, message)
        obj = move(self.client, obj, BackupPhase.FAILED, reason, message, {"links": None})
        return Result.done() if self.pull.unserve(obj) else Result.requeue(STOP_POLL)

    def _source(self, obj: VirtualMachineBackup) -> Source:
        namespace = obj.metadata.namespace
        name = obj.spec.source.name
        tracker = None
        if obj.spec.source.kind == BackupSourceKind.VIRTUAL_MACHINE_BACKUP_TRACKER:
            tracker = self.client.get(VirtualMachineBackupTracker, namespace, name)
            if tracker is None:
                raise BackupFailure(
                    f"the VirtualMachineBackupTracker {namespace}/{name} does not exist",
                    reason=TRACKER_NOT_FOUND,
                )
            name = tracker.spec.source.name
        vm = self.client.get(VirtualMachine, namespace, name)
        if vm is None:
            raise BackupFailure(
                f"the VirtualMachine {namespace}/{name} does not exist",
                reason=VM_NOT_FOUND,
            )
        latest = None if tracker is None else tracker.status.latest_checkpoint
        since = None if latest is None or obj.spec.force_full_backup else latest.name
        return Source(vm, tracker, since)
