"""DataUpload: all the disks of one VirtualMachine backed up at one consistent point.

One active DataUpload per VM: the oldest wins (the uid breaks a tie), and one older than
`staleDataUploadThreshold` no longer blocks; a waiting one names the one it waits for. The
engine decides full or incremental per disk from the repository's chain and the disk's
checkpoints (full when asked by `diskferry.io/force-full-backup`, or when the incrementals
reached `maxIncrementalBackups` or the VM's `diskferry.io/max-incremental-backups`); each
disk's decision and reason go into `status.disks` and an Event. A running VM is frozen
through its guest agent unless `diskferry.io/skip-quiesce`; an agent that does not answer is
a warning (the backup is crash-consistent) unless `diskferry.io/require-quiesce` makes it a
failure. A full backup that read nothing from a disk holding data fails (the zero-data case).
A disk without CBT is backed up in full, and its reason names the VM's label that turns CBT
on; a running VM's disks are read only through CBT, so without it the upload fails saying so.
The hooks the annotation `diskferry.io/hooks` names run in a running VM's guest through its
agent, pre ones before the point, post ones after (`status.hooks`, an Event each).
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from diskferry.backup import (
    BackupJob,
    BackupPoint,
    BackupResult,
    DiskSource,
    FailedHook,
    HookCommand,
    PointDisk,
)
from diskferry.control.clock import Clock
from diskferry.control.host.machines import Machines
from diskferry.control.host.points import BackupPoints, PointError
from diskferry.control.host.volumes import Claim, Volumes
from diskferry.control.reconcilers.datamover.admission import Scheduler, age_order
from diskferry.control.reconcilers.datamover.moverlife import (
    Job,
    MoverFailure,
    MoverReconciler,
    Waiting,
)
from diskferry.control.reconcilers.disks.datasources import DISK_CLAIM_LOST, claim_of
from diskferry.control.reconcilers.velero.repoaccess import Location
from diskferry.control.reconcilers.vms import vmcbt
from diskferry.control.reconcilers.vms.overlayspace import DiskRoom, shortfall
from diskferry.control.reconcilers.vms.quiesce import agent_silence
from diskferry.control.resources.datamover import ENDED, MoverPhase
from diskferry.control.resources.datamoverconfig import DataMoverConfigSpec
from diskferry.control.resources.dataupload import (
    DATA_UPLOADS,
    DISKS,
    FORCE_FULL,
    HOOKS,
    MAX_INCREMENTALS,
    REQUIRE_QUIESCE,
    SKIP_QUIESCE,
    VM_NAME,
    DataUpload,
)
from diskferry.control.resources.duration import parse_duration
from diskferry.control.resources.model import Reason
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualmachine import BlockDeviceKind, MachinePhase, VirtualMachine
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.phases import READY
from diskferry.control.runtime.runner.base import JobFile, Runner

CBT_OFF = Reason("ChangedBlockTrackingOff")
VM_NOT_FOUND = Reason("VirtualMachineNotFound")
BAD_HOOKS = Reason("BadHooks")
NO_VIRTUAL_MACHINE = Reason("NoVirtualMachine")
NO_DISKS = Reason("NoDisks")
READ_ONLY = Reason("ReadOnly")
INSUFFICIENT_SPACE = Reason("InsufficientSpace")
HOOKS_CANNOT_RUN = Reason("HooksCannotRun")
QUIESCE_FAILED = Reason("QuiesceFailed")
ZERO_DATA = Reason("ZeroData")
POINT_TOKEN_FILE = "point-token"
POINT_CA_FILE = "point-ca.pem"


HOOK_LIST = TypeAdapter(list[HookCommand])
NODE_OS = "linux"
"""The OS of the host that moves the data, as Velero's status.nodeOS names it."""


def hooks_of(obj: DataUpload) -> list[HookCommand]:
    """The hooks the annotation names (MoverFailure when it is not a list of them)."""
    given = obj.metadata.annotations.get(HOOKS)
    if not given:
        return []
    try:
        return HOOK_LIST.validate_json(given)
    except ValidationError as e:
        raise MoverFailure(
            f"the annotation {HOOKS} is not a JSON list of hooks: {e.errors()[0]['msg']}",
            reason=BAD_HOOKS,
        ) from None


def vm_of(obj: DataUpload) -> tuple[str, str]:
    """The namespace and name of the upload's VM (MoverFailure without the annotation)."""
    name = obj.metadata.annotations.get(VM_NAME)
    if not name:
        raise MoverFailure(
            f"the annotation {VM_NAME} does not name a VM: a DataUpload here backs up the disks "
            "of the VirtualMachine it names (spec.sourcePVC and spec.csiSnapshot are not read)",
            reason=NO_VIRTUAL_MACHINE,
        )
    return obj.spec.source_namespace or obj.metadata.namespace or "default", name


def repository_vm(namespace: str, name: str) -> str:
    """The VM's name in the repository: namespace and name, so that namespaces do not mix."""
    return f"{namespace}.{name}"


def vm_claims(
    client: Client, volumes: Volumes, namespace: str, vm: VirtualMachine, only: str | None
) -> dict[str, Claim] | Waiting:
    """The claim of each VirtualDisk of the VM (those in the comma-separated `only`, when
    given), once each is Ready; MoverFailure when there is none or a claim is gone."""
    refs = vm.spec.block_device_refs
    disks = [r.name for r in refs if r.kind is BlockDeviceKind.VIRTUAL_DISK]
    if only is not None:
        disks = [d for d in disks if d in only.split(",")]
    if not disks:
        raise MoverFailure("the VirtualMachine has no VirtualDisk to back up", reason=NO_DISKS)
    claims = {}
    for disk_name in disks:
        disk = client.get(VirtualDisk, namespace, disk_name)
        phase = None if disk is None else disk.status.phase
        if disk is None or phase != READY:
            said = "does not exist" if disk is None else f"is {phase or 'new'}"
            return Waiting(f"waiting for the VirtualDisk {disk_name} to be Ready: it {said}")
        claim = claim_of(client, volumes, disk)
        if claim is None or not claim.ready:
            raise MoverFailure(
                f"the claim of the VirtualDisk {disk_name} is gone", reason=DISK_CLAIM_LOST
            )
        claims[disk_name] = claim
    return claims


def _yes(obj: Any, annotation: str) -> bool:
    return obj.metadata.annotations.get(annotation, "").lower() == "true"


def _limit(
    obj: DataUpload, vm_annotations: dict[str, str], config: DataMoverConfigSpec
) -> str | None:
    """The most incrementals after a full: the upload's annotation, else the VM's, else the
    DataMoverConfig's (None: the repository's own)."""
    limit = obj.metadata.annotations.get(MAX_INCREMENTALS) or vm_annotations.get(MAX_INCREMENTALS)
    if limit is None and config.max_incremental_backups:
        limit = str(config.max_incremental_backups)
    return limit


class DataUploadReconciler(MoverReconciler):
    """Backs up each DataUpload's VM."""

    info = DATA_UPLOADS
    result_model = BackupResult
    prefix = "du"
    log_words = "data mover log"
    running = "the data mover is backing up the disks"

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        scheduler: Scheduler,
        machines: Machines,
        clock: Clock | None = None,
        points: BackupPoints | None = None,
    ) -> None:
        super().__init__(client, runner, volumes, scheduler, clock)
        self.machines = machines
        self.points = points

    def who(self, obj: DataUpload) -> str:
        """The VM, as `VirtualMachine namespace/name`."""
        namespace = obj.spec.source_namespace or obj.metadata.namespace
        return f"VirtualMachine {namespace}/{obj.metadata.annotations.get(VM_NAME, '?')}"

    def blocker(self, obj: DataUpload, config: DataMoverConfigSpec) -> str | None:
        """The older active upload of the same VM, unless it is stale."""
        vm = vm_of(obj)
        now = self.clock.now()
        stale = parse_duration(config.stale_data_upload_threshold).total_seconds()
        mine = age_order(obj)
        for other in self.client.list(DataUpload):
            if other.metadata.uid == obj.metadata.uid or other.status.phase in ENDED:
                continue
            if other.metadata.annotations.get(VM_NAME) is None or vm_of(other) != vm:
                continue
            created = other.metadata.creation_timestamp
            if created is not None and (now - created).total_seconds() > stale:
                continue
            active = other.status.phase not in (None, MoverPhase.NEW)
            if active or age_order(other) < mine:
                where = other.metadata.namespace
                return (
                    f"waiting for DataUpload {where}/{other.metadata.name}: one upload of "
                    f"VirtualMachine {vm[0]}/{vm[1]} at a time"
                )
        return None

    def prepare(
        self, obj: DataUpload, location: Location, config: DataMoverConfigSpec
    ) -> Job | Waiting:
        """The backup job of the VM's disks, once each is Ready and there is room."""
        bsl = self._location(obj)
        if bsl is not None and bsl.spec.access_mode == "ReadOnly":
            raise MoverFailure(
                f"the BackupStorageLocation {bsl.metadata.name} is ReadOnly", reason=READ_ONLY
            )
        namespace, name = vm_of(obj)
        if self.points is not None:
            return self._from_point(self.points, obj, location, config)
        vm = self.client.get(VirtualMachine, namespace, name)
        if vm is None:
            raise MoverFailure(
                f"the VirtualMachine {namespace}/{name} does not exist",
                reason=VM_NOT_FOUND,
            )
        only = obj.metadata.annotations.get(DISKS)
        claims = vm_claims(self.client, self.volumes, namespace, vm, only)
        if isinstance(claims, Waiting):
            return claims
        running = vm.status.phase == MachinePhase.RUNNING
        if running and not all(self.volumes.tracked(c) for c in claims.values()):
            raise MoverFailure(
                f"{vmcbt.off_reason(self.client, vm)}; the disks of a running VM are read only "
                "through CBT",
                reason=CBT_OFF,
            )
        rooms = [DiskRoom(str(c.file), c.size()) for c in claims.values()]
        short = shortfall(rooms, running)
        if short:
            raise MoverFailure(short, reason=INSUFFICIENT_SPACE)
        limit = _limit(obj, vm.metadata.annotations, config)
        fields: dict[str, Any] = {}
        if running:
            fields["qmp"] = self.machines.sockets(vm).qmp
            fields.update(self._quiesce(obj, vm))
        fields.update(self._hooks(obj, vm, running))
        job, files = location.job(
            BackupJob,
            vm=repository_vm(namespace, name),
            disks=[DiskSource(name=disk, path=str(c.file)) for disk, c in claims.items()],
            full=_yes(obj, FORCE_FULL),
            wait=True,
            max_incrementals=limit,
            bandwidth_limit=config.bandwidth_bytes,
            **fields,
        )
        return Job(job, files, f"disks {', '.join(claims)} of VirtualMachine {name} ready")

    def _from_point(
        self,
        points: BackupPoints,
        obj: DataUpload,
        location: Location,
        config: DataMoverConfigSpec,
    ) -> Job | Waiting:
        """The backup job of the point the VM's hypervisor serves for the upload, once it
        answers: its disks (those of `diskferry.io/disks`, when given) read through their
        endpoints, with the point's token and CA as the job's files."""
        namespace, name = vm_of(obj)
        full = _yes(obj, FORCE_FULL)
        ttl = self._timeout(obj, config)
        try:
            served = points.point(
                self.job_id(obj),
                namespace,
                name,
                chain=obj.spec.backup_storage_location,
                full=full,
                ttl=ttl,
            )
        except PointError as e:
            raise MoverFailure(e.message, reason=e.reason) from e
        if isinstance(served, str):
            return Waiting(served)
        only = obj.metadata.annotations.get(DISKS)
        disks = [d for d in served.disks if only is None or d.name in only.split(",")]
        if not disks:
            raise MoverFailure(f"{served.name} serves no disk to back up", reason=NO_DISKS)
        if hooks_of(obj) and obj.status.phase == MoverPhase.ACCEPTED:
            names = ", ".join(h.name for h in hooks_of(obj))
            message = f"the hooks ({names}) run only in the guests of VMs diskferry runs"
            self.client.event(obj, "Warning", "HooksNotRun", message)
        point = BackupPoint(
            disks=[PointDisk(name=d.name, data=d.data, map=d.map, since=d.since) for d in disks],
            token_file=POINT_TOKEN_FILE,
            ca_file=POINT_CA_FILE,
            checkpoint=served.checkpoint,
            consistency=served.consistency,
        )
        job, files = location.job(
            BackupJob,
            vm=repository_vm(namespace, name),
            point=point,
            full=full,
            wait=True,
            max_incrementals=_limit(obj, {}, config),
            bandwidth_limit=config.bandwidth_bytes,
        )
        files += [
            JobFile(POINT_TOKEN_FILE, served.token, credential=True),
            JobFile(POINT_CA_FILE, served.ca),
        ]
        return Job(job, files, f"{served.name} of VirtualMachine {name} is served")

    def cleanup(self, obj: DataUpload, succeeded: bool) -> bool:
        """End the point read for the upload, when its VM's hypervisor served one; whether it
        is gone."""
        if self.points is None:
            return True
        namespace, _ = vm_of(obj)
        return self.points.release(self.job_id(obj), namespace)

    def _hooks(self, obj: DataUpload, vm: VirtualMachine, running: bool) -> dict[str, Any]:
        """The job's fields of the annotation's hooks and the agent that runs them. Only a
        running VM's guest runs them (a stopped VM's disks do not change); without an agent
        that answers, a hook with onError Fail fails the upload, others are a Warning."""
        hooks = hooks_of(obj)
        if not hooks:
            return {}
        once = obj.status.phase == MoverPhase.ACCEPTED  # not at each look while Prepared
        names = ", ".join(h.name for h in hooks)
        if not running:
            if once:
                message = f"the VM is not running: its hooks ({names}) do not run"
                self.client.event(obj, "Normal", "HooksNotRun", message)
            return {}
        agent = self.machines.sockets(vm).agent
        silence = agent_silence(self.machines, vm)
        if silence is not None:
            if any(h.on_error == "Fail" for h in hooks):
                raise MoverFailure(
                    f"{silence}: the hooks ({names}) cannot run in its guest",
                    reason=HOOKS_CANNOT_RUN,
                )
            if once:
                message = f"{silence}: the hooks ({names}) do not run"
                self.client.event(obj, "Warning", "HooksNotRun", message)
            return {}
        return {"hooks": hooks, "hook_agent": agent}

    def _quiesce(self, obj: DataUpload, vm: VirtualMachine) -> dict[str, Any]:
        """The job's field of the agent that freezes the guest when it answers; otherwise
        warn, or fail when a frozen guest is required."""
        wanted = {**vm.metadata.annotations, **obj.metadata.annotations}
        if wanted.get(SKIP_QUIESCE, "").lower() == "true":
            return {}
        socket_path = self.machines.sockets(vm).agent
        silence = agent_silence(self.machines, vm)
        if silence is None:
            return {"qga": socket_path}
        if wanted.get(REQUIRE_QUIESCE, "").lower() == "true":
            raise MoverFailure(
                f"{silence}, and {REQUIRE_QUIESCE} asks for a frozen guest", reason=QUIESCE_FAILED
            )
        if obj.status.phase == MoverPhase.ACCEPTED:  # once, not at each look while Prepared
            message = f"{silence}: the backup is crash-consistent"
            self.client.event(obj, "Warning", "QuiesceUnavailable", message)
        return {}

    def failure_fields(self, obj: DataUpload, reason: str, message: str) -> dict[str, Any]:
        """The hook that stopped the backup, when one did."""
        failed = FailedHook.named_in(reason, message)
        if failed is None:
            return {}
        return {"hooks": [{**failed.to_json(), "failed": True, "message": message}]}

    def completed(self, obj: DataUpload, result: BackupResult) -> dict[str, Any]:
        """The backup id, each disk, and the bytes; a full backup that read nothing from a
        disk with data fails."""
        namespace, name = vm_of(obj)
        vm = self.client.get(VirtualMachine, namespace, name)
        for disk in result.disks:
            if disk.type == "full" and not disk.bytes_read:
                vd = self.client.get(VirtualDisk, namespace, disk.disk)
                claim = None if vd is None else claim_of(self.client, self.volumes, vd)
                if claim is not None and claim.allocated() > 0:
                    raise MoverFailure(
                        f"the backup of disk {disk.disk} read no data although the disk holds "
                        f"{claim.allocated()} bytes: the disk was not seen as it is",
                        reason=ZERO_DATA,
                    )
        listed = []
        for disk in result.disks:
            reason = disk.reason
            if not disk.cbt and vm is not None:  # the engine's reason names a file
                reason = vmcbt.off_reason(self.client, vm)
            listed.append(
                {
                    "name": disk.disk,
                    "snapshotID": disk.snapshot,
                    "type": disk.type,
                    "reason": reason,
                    "bytesRead": disk.bytes_read,
                    "bytesUploaded": disk.bytes_uploaded,
                    "checkpoint": disk.checkpoint,
                }
            )
            kind = "IncrementalBackup" if disk.type == "incremental" else "FullBackup"
            self.client.event(obj, "Normal", kind, f"disk {disk.disk}: {disk.type} ({reason})")
        read = sum(d.bytes_read for d in result.disks)
        kinds = sorted({d.type for d in result.disks})
        for hook in result.hooks:
            said = f"hook {hook.name} ({hook.phase}): {hook.message}"
            if hook.failed:
                self.client.event(obj, "Warning", "HookFailed", said)
            else:
                self.client.event(obj, "Normal", "HookRan", said)
        return {
            "snapshotID": result.backup,
            "nodeOS": NODE_OS,
            "hooks": [h.to_json() for h in result.hooks],
            "disks": listed,
            "consistency": result.consistency,
            "incrementalBytes": sum(d.bytes_uploaded for d in result.disks),
            "progress": {"totalBytes": read, "bytesDone": read},
            "message": f"backup {result.backup} done ({' and '.join(kinds)})",
        }
