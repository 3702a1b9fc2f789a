"""VirtualDiskSnapshot: a point-in-time copy of a Ready disk into a claim of the disk's class.

A file claim is cloned with `cp --reflink=always` where the filesystem shares extents (at
once, nothing copied); otherwise, and for block claims, the import worker copies it with
the copy engine (holes skipped). A disk that a running VirtualMachine holds is copied as
Deckhouse's `requiredConsistency` says: when required (the default), only at an instant
(a reflink) with the guest's filesystems frozen through its agent, and otherwise the
snapshot waits Pending (PotentiallyInconsistent) for the VM to stop or its agent to answer;
when not required, at once, with `consistent: false`. A VM that takes up the disk while it
is copied also makes the copy `consistent: false`. Phases Pending, InProgress, Ready,
Failed, Terminating.
"""

from __future__ import annotations

import logging
from typing import Any

from diskferry.control.host.machines import MachineError, Machines
from diskferry.control.host.volumes import Claim, VolumeError, Volumes
from diskferry.control.reconcilers.disks.claimlife import POLL_SECONDS, WAIT_SECONDS
from diskferry.control.reconcilers.disks.datasources import DISK_CLAIM_LOST, claim_name, claim_of
from diskferry.control.reconcilers.disks.importjob import Imports, Source
from diskferry.control.reconcilers.disks.inuse import disk_holders, names
from diskferry.control.reconcilers.disks.teardown import terminate
from diskferry.control.reconcilers.disks.volumejobs import REFLINK, reflink_job, step, volume_job_id
from diskferry.control.reconcilers.vms.quiesce import agent_silence
from diskferry.control.resources.model import Reason
from diskferry.control.resources.vdsnapshot import VIRTUAL_DISK_SNAPSHOTS, VirtualDiskSnapshot
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualmachine import VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting, held
from diskferry.control.runtime.phases import (
    FAILED,
    PENDING,
    READY,
    status_of,
    transition,
    update_fields,
)
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Running
from diskferry.importer import ReflinkResult

log = logging.getLogger("diskferry.control")
IN_PROGRESS = Reason("InProgress")
POTENTIALLY_INCONSISTENT = Reason("PotentiallyInconsistent")
GUEST_NOT_FROZEN = Reason("GuestNotFrozen")
WAITING_FOR_DISK = Reason("WaitingForDisk")
COPY_FAILED = Reason("CopyFailed")


class VirtualDiskSnapshotReconciler:
    """Copies each snapshot's disk once it is Ready."""

    info = VIRTUAL_DISK_SNAPSHOTS

    def __init__(
        self, client: Client, runner: Runner, volumes: Volumes, machines: Machines
    ) -> None:
        self.client = client
        self.volumes = volumes
        self.machines = machines
        self.imports = Imports(runner)
        self.jobs = Jobs(runner)

    def job_id(self, obj: VirtualDiskSnapshot) -> str:
        """The id of the snapshot's copy job."""
        return f"vds-{obj.metadata.uid}"

    def reflink_id(self, obj: VirtualDiskSnapshot) -> str:
        """The id of the snapshot's instant copy job."""
        return volume_job_id("vds", REFLINK, obj.metadata.uid)

    def reconcile(self, obj: VirtualDiskSnapshot) -> Result:
        """One step of the snapshot's life."""
        if deleting(obj):
            job_ids = [self.job_id(obj), self.reflink_id(obj)]
            return terminate(self.client, self.volumes, self.imports, obj, job_ids)
        obj = held(self.client, obj)
        status = status_of(obj)
        phase = status.get("phase")
        if phase in (READY, FAILED) and status.get("observedGeneration") == obj.metadata.generation:
            self.imports.settle(self.job_id(obj), keep=phase == FAILED)
            self.jobs.settle(self.reflink_id(obj), tag(obj), keep=phase == FAILED)
            if phase == READY:  # as the daemon named it, whatever a client patched in
                update_fields(self.client, obj, {"volumeSnapshotName": claim_name(obj)})
            return Result.done()
        if phase is None:
            obj = transition(self.client, obj, PENDING, PENDING, "waiting for the disk")
        disk = self.client.get(VirtualDisk, obj.metadata.namespace, obj.spec.virtual_disk_name)
        disk_phase = None if disk is None else disk.status.phase
        if disk is None or disk_phase != READY:
            name = obj.spec.virtual_disk_name
            said = "does not exist" if disk is None else f"is {disk_phase or 'new'}"
            message = f"waiting for the VirtualDisk {name} to be Ready: it {said}"
            transition(self.client, obj, PENDING, WAITING_FOR_DISK, message)
            return Result.requeue(WAIT_SECONDS)
        source = claim_of(self.client, self.volumes, disk)
        if source is None or not source.ready:
            return self._fail(
                obj, DISK_CLAIM_LOST, f"the claim of the VirtualDisk {disk.metadata.name} is gone"
            )
        return self._copy(obj, source, disk)

    def _copy(self, obj: VirtualDiskSnapshot, source: Claim, disk: VirtualDisk) -> Result:
        job_id = self.job_id(obj)
        copying = self.imports.started(job_id)
        namespace, name = obj.metadata.namespace, obj.spec.virtual_disk_name
        holders = [] if copying else disk_holders(self.client, namespace, name)
        required = obj.spec.required_consistency
        agents = self._agents(holders) if holders and required else []
        if isinstance(agents, str):
            return self._wait_for_consistency(obj, agents)
        if holders and required and not self.volumes.instant_copies(source):
            why = f"its class {source.volume_class.name} cannot take an instant copy"
            return self._wait_for_consistency(obj, why)
        fields: dict[str, Any] = {"volumeSnapshotName": claim_name(obj)}
        if holders and not required:
            fields["consistent"] = False
        obj = transition(self.client, obj, IN_PROGRESS, IN_PROGRESS, "copying the disk", fields)
        size = source.size()
        try:
            claim = self.volumes.claim(
                source.volume_class, obj.metadata.namespace, claim_name(obj), size
            )
        except VolumeError as e:
            transition(self.client, obj, PENDING, e.reason, e.message)
            return Result.requeue(WAIT_SECONDS)
        if not claim.block and not copying:
            instant = self._instant_copy(obj, source, claim, agents)
            if isinstance(instant, Result):
                return instant
            if instant:
                return self._ready(obj, claim, disk, frozen=bool(holders) and required)
            if holders and required:
                why = f"its class {source.volume_class.name} cannot take an instant copy"
                return self._wait_for_consistency(obj, why)
        outcome = self.imports.step(job_id, claim, Source(str(source.file), size=size), size)
        if outcome.running:
            return Result.requeue(POLL_SECONDS)
        if outcome.failed:
            self._fail(obj, outcome.reason or COPY_FAILED, outcome.message or "")
            self.imports.finish(job_id, tag(obj), keep=True)
            return Result.done()
        self._ready(obj, claim, disk)
        self.imports.finish(job_id, tag(obj), keep=False)
        return Result.done()

    def _instant_copy(
        self, obj: VirtualDiskSnapshot, source: Claim, claim: Claim, agents: list[str]
    ) -> Result | bool:
        """The claim made an instant copy of `source` by a worker, the guests whose agents are
        at `agents` frozen for that instant: a Result while it runs or when a guest would not
        freeze, else whether the copy was made (not where extents cannot be shared)."""
        job_id = self.reflink_id(obj)
        if claim.ready:  # an earlier reconcile's worker made it
            self.jobs.settle(job_id, tag(obj), keep=False)
            return True
        job = reflink_job(str(source.file), claim, agents=agents)
        outcome = step(self.jobs, job_id, job, ReflinkResult)
        if isinstance(outcome, Running):
            return Result.requeue(POLL_SECONDS)
        failed = isinstance(outcome, Failed)
        self.jobs.settle(job_id, tag(obj), keep=failed)
        if isinstance(outcome, Failed) and outcome.reason == GUEST_NOT_FROZEN:
            return self._wait_for_consistency(obj, "its guest agent did not freeze the guest")
        if isinstance(outcome, Failed):
            log.info("%s: no instant copy (%s), the disk is copied", tag(obj), outcome.message)
            return False
        return outcome.result.cloned

    def _agents(self, holders: list[VirtualMachine]) -> list[str] | str:
        """The guest-agent sockets of the VMs that hold the disk, or why one cannot freeze."""
        agents = []
        for vm in holders:
            try:
                agent = self.machines.sockets(vm).agent
                silence = agent_silence(self.machines, vm)
            except MachineError as e:
                return f"the VirtualMachine {vm.metadata.name}: {e.message}"
            if silence is not None:
                return f"the VirtualMachine {vm.metadata.name}: {silence}"
            agents.append(str(agent))
        return agents

    def _wait_for_consistency(self, obj: VirtualDiskSnapshot, why: str) -> Result:
        disk = obj.spec.virtual_disk_name
        holders = disk_holders(self.client, obj.metadata.namespace, disk)
        message = (
            f"the VirtualDisk {disk} is in use by the running VirtualMachine {names(holders)} "
            f"and {why}: the snapshot waits for the VM to stop or for its guest agent to "
            "freeze it (requiredConsistency: false takes it now, not consistent)"
        )
        transition(self.client, obj, PENDING, POTENTIALLY_INCONSISTENT, message)
        return Result.requeue(WAIT_SECONDS)

    def _ready(
        self, obj: VirtualDiskSnapshot, claim: Claim, disk: VirtualDisk, frozen: bool = False
    ) -> Result:
        """Ready; consistent when taken at an instant with the guests frozen, or while no VM
        held the disk (none took it up while it was copied)."""
        self.volumes.seal(claim)
        taken_unfrozen = status_of(obj).get("consistent") is False
        held_now = disk_holders(self.client, obj.metadata.namespace, obj.spec.virtual_disk_name)
        fields: dict[str, Any] = {
            "consistent": frozen or not (taken_unfrozen or held_now),
            "volumeSnapshotName": claim_name(obj),
        }
        message = f"a copy of the VirtualDisk {disk.metadata.name}"
        transition(self.client, obj, READY, READY, message, fields)
        return Result.done()

    def _fail(self, obj: VirtualDiskSnapshot, reason: str, message: str) -> Result:
        transition(self.client, obj, FAILED, reason, message)
        return Result.done()
