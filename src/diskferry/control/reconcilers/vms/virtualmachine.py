"""VirtualMachine: a QEMU process per VM, kept to its run policy; Deckhouse's phases.

AlwaysOn starts the VM and starts it again when it ends (crash, guest power-off);
AlwaysOnUnlessStoppedManually (the default) does so too unless it was stopped by hand: the
guest powered itself off, or the policy was AlwaysOff since (switched back, it starts again);
AlwaysOff stops it; Manual leaves it as it is. A VM waits in Pending until every disk and image
it names is Ready, its class admits it and this host's node meets its selectors. Stopping
presses the guest's ACPI power button and waits `terminationGracePeriodSeconds` for it to power
off, then ends QEMU with SIGTERM (on which it quits cleanly at once). Deleting the VM stops it
so, then removes its directory. A VM
with `spec.qmpSocket` runs elsewhere: diskferry only watches it (its phase, its disks'
targets, its CBT state) and never starts or stops it; a socket outside DATA_DIR/vm-sockets
(see `host.embedded.machines`) is refused, and the VM Degraded, without a connection.

The sockets the daemon reaches a VM's QEMU by (`Machines.sockets`) are the ones the host
decided: status shows them, and is never read back for them. The VM runs on the host's
machines (`host.machines`): QEMU processes on the embedded host, what the reconciler asks of
QEMU and of the guest agent the machines answer; a disk moved on or off CBT is a worker's job.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from diskferry.backup import CbtResult
from diskferry.base.errors import DiskferryError
from diskferry.control.clock import Clock
from diskferry.control.host.images import ImageNotStoredError, ImageStore
from diskferry.control.host.machines import (
    Device,
    Launched,
    MachineDisk,
    MachineError,
    Machines,
    SocketRefusedError,
)
from diskferry.control.host.node import node_name
from diskferry.control.host.volumes import Claim, Volumes
from diskferry.control.reconcilers.disks.datasources import claim_of, kept_in_store
from diskferry.control.reconcilers.disks.volumejobs import step
from diskferry.control.reconcilers.vms import vmcbt
from diskferry.control.reconcilers.vms.vmclass import class_of
from diskferry.control.reconcilers.vms.vmlaunch import (
    Admitted,
    Hold,
    admit,
    machine_spec,
    network_status,
    seed_of,
)
from diskferry.control.reconcilers.vms.vmstatus import applied, replacing, restart_changes, stats
from diskferry.control.resources.model import Reason, Resource
from diskferry.control.resources.quantity import format_bytes
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import ClusterVirtualImage, VirtualImage
from diskferry.control.resources.virtualmachine import (
    AGENT_READY,
    AWAITING_RESTART,
    MIGRATABLE,
    NETWORK_READY,
    PROVISIONING_READY,
    VIRTUAL_MACHINES,
    BlockDeviceKind,
    BlockDeviceSpecRef,
    Bootloader,
    CbtState,
    MachinePhase,
    RestartApprovalMode,
    RunPolicy,
    VirtualMachine,
)
from diskferry.control.resources.virtualmachineclass import VirtualMachineClass
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.finalizer import deleting, held, release
from diskferry.control.runtime.phases import (
    READY,
    STARTING,
    TERMINATING,
    Condition,
    status_of,
    transition,
)
from diskferry.control.runtime.reconciler import Result, tag
from diskferry.control.runtime.runner.base import Runner
from diskferry.control.runtime.runner.jobs import Failed, Jobs, Running, Succeeded

WATCH_SECONDS = 2.0
STEP_SECONDS = 0.2
RETRY_SECONDS = 10.0
GUEST_SHUTDOWN = Reason("GuestShutdown")
POWERED_OFF = Reason("GuestPoweredOff")
GRACE_OVER = Reason("GracePeriodOver")
RESTARTING = Reason("Restarting")
STOPPING = Reason("Stopping")
STOPPED = Reason("Stopped")
QEMU_EXITED = Reason("QemuExited")
QMP_UNREACHABLE = Reason("QmpUnreachable")
AWAITING = (
    "Waiting for the user to restart in order to apply the configuration changes (set "
    "spec.runPolicy AlwaysOff and back, or spec.disruptions.restartApprovalMode: Automatic)."
)
ONE_HOST = "this host is the one node: there is nowhere to migrate the VM to"
GRACE_POLL_SECONDS = 0.5
LAUNCHED = Reason("QemuLaunched")
QEMU_FAILED = Reason("QemuFailed")
BLOCK_DEVICES_NOT_READY = Reason("BlockDevicesNotReady")
PROVISIONING_NOT_READY = Reason("ProvisioningNotReady")
_KINDS: dict[BlockDeviceKind, type[Resource]] = {
    BlockDeviceKind.VIRTUAL_DISK: VirtualDisk,
    BlockDeviceKind.VIRTUAL_IMAGE: VirtualImage,
    BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE: ClusterVirtualImage,
}
_PREFIX = {
    BlockDeviceKind.VIRTUAL_DISK: "vd",
    BlockDeviceKind.VIRTUAL_IMAGE: "vi",
    BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE: "cvi",
}
_NODE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,30}$")
_ACTIVE = (MachinePhase.STARTING, MachinePhase.RUNNING, MachinePhase.PAUSE, MachinePhase.STOPPING)


class CbtChangeError(DiskferryError):
    """A worker could not move a VM's disk on or off CBT: tried again later."""

    reason = "CbtChangeFailed"


@dataclass(frozen=True)
class Attached:
    """A block device of the VM and the file behind it: a disk's or an image's `claim` (raw),
    or the part of an image's layer in the store that holds its disk (`within`, in `format`)."""

    ref: BlockDeviceSpecRef
    file: str
    size: int
    format: str = "raw"
    within: tuple[int, int] | None = None
    cdrom: bool = False
    claim: Claim | None = None

    @property
    def target(self) -> str:
        """Its QEMU node name and device id (at most 31 characters, as QEMU allows)."""
        wanted = f"{_PREFIX[self.ref.kind]}-{self.ref.name}"
        if _NODE_NAME.match(wanted):
            return wanted
        digest = hashlib.sha256(self.ref.name.encode()).hexdigest()[:16]
        return f"{_PREFIX[self.ref.kind]}-{digest}"

    def listed(self, attached: bool, boot_order: int) -> dict[str, Any]:
        """The device as Deckhouse's `status.blockDeviceRefs` lists it."""
        ref = self.ref
        return {
            "kind": str(ref.kind),
            "name": ref.name,
            "size": format_bytes(self.size),
            "attached": attached,
            "bootOrder": boot_order,
        }

    def status(self) -> dict[str, Any]:
        """The device as `status.blockDevices` lists it."""
        ref = self.ref
        return {
            "kind": str(ref.kind),
            "name": ref.name,
            "target": self.target,
            "readOnly": ref.read_only,
        }


def _phase(obj: Resource) -> str | None:
    return status_of(obj).get("phase")


def _reason(obj: Resource) -> str | None:
    ready = [c for c in status_of(obj).get("conditions") or [] if c.get("type") == READY]
    return ready[0].get("reason") if ready else None


def _ready_message(obj: Resource) -> str | None:
    ready = [c for c in status_of(obj).get("conditions") or [] if c.get("type") == READY]
    return ready[0].get("message") if ready else None


class VirtualMachineReconciler:
    """Runs each VirtualMachine's QEMU as its run policy says."""

    info = VIRTUAL_MACHINES

    def __init__(
        self,
        client: Client,
        runner: Runner,
        volumes: Volumes,
        store: ImageStore,
        machines: Machines,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.jobs = Jobs(runner)
        self.volumes = volumes
        self.machines = machines
        self.store = store
        self.clock = clock or Clock()

    def _move(
        self,
        obj: VirtualMachine,
        phase: MachinePhase,
        reason: str,
        message: str,
        fields: dict[str, Any] | None = None,
        ready: bool | None = None,
        conditions: dict[str, Condition | None] | None = None,
    ) -> VirtualMachine:
        """`transition` with what Deckhouse's status adds to a phase: the node while QEMU is
        there, the resources the VM runs (or would run) with, the phase history."""
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        status = status_of(obj)
        active = phase in _ACTIVE
        launched = self.machines.launch(namespace, name).get("resources") if active else None
        before = status.get("stats")
        extra = {
            "nodeName": node_name() if active else None,
            "resources": launched or self._would_run_with(obj),
            "stats": replacing(before, stats(before, phase, self.clock.now())),
        }
        fields = {**extra, **(fields or {})}
        return transition(self.client, obj, phase, reason, message, fields, ready, conditions)

    def _would_run_with(self, obj: VirtualMachine) -> dict[str, Any]:
        found = class_of(self.client, obj)
        return Admitted(found if isinstance(found, VirtualMachineClass) else None).resources(obj)

    def reconcile(self, obj: VirtualMachine) -> Result:
        """One step towards the run policy."""
        if deleting(obj):
            return self._delete(obj)
        obj = held(self.client, obj)
        if obj.spec.qmp_socket:
            return self._watch_external(obj)
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        if self.machines.running(namespace, name):
            if obj.spec.run_policy is RunPolicy.ALWAYS_OFF:
                return self._shut_down(obj, "the run policy is AlwaysOff")
            return self._observe(obj)
        if _reason(obj) == LAUNCHED:
            return self._failed_start(obj)
        since = self.machines.since_start(namespace, name)
        if _phase(obj) == MachinePhase.DEGRADED and since is not None and since < RETRY_SECONDS:
            return Result.requeue(RETRY_SECONDS - since)
        if self._should_start(obj):
            return self._start(obj)
        return self._stopped(obj)

    def _failed_start(self, obj: VirtualMachine) -> Result:
        """QEMU ended before it answered: Degraded with its last words, tried again later."""
        message = self._exit_message(obj)
        self._move(obj, MachinePhase.DEGRADED, QEMU_FAILED, message, _gone_fields())
        return Result.requeue(RETRY_SECONDS)

    def _should_start(self, obj: VirtualMachine) -> bool:
        policy = obj.spec.run_policy
        if _reason(obj) == RESTARTING:
            return policy is not RunPolicy.ALWAYS_OFF
        if policy is RunPolicy.ALWAYS_ON:
            return True
        if policy is RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY:
            return _reason(obj) != GUEST_SHUTDOWN
        return False

    def _attached(self, obj: VirtualMachine) -> list[Attached] | str:
        """The VM's block devices, or why it must wait for one."""
        found = []
        for ref in obj.spec.block_device_refs:
            cluster_wide = ref.kind is BlockDeviceKind.CLUSTER_VIRTUAL_IMAGE
            namespace = None if cluster_wide else obj.metadata.namespace
            device = self.client.get(_KINDS[ref.kind], namespace, ref.name)
            if device is None:
                return f"waiting for the {ref.kind} {ref.name}: it does not exist"
            phase = _phase(device)
            if phase != READY:
                return f"waiting for the {ref.kind} {ref.name} to be Ready (it is {phase or 'new'})"
            shown = status_of(device)
            cdrom = bool(shown.get("cdrom"))
            if kept_in_store(device):
                try:
                    disk = self.store.disk(device)
                except ImageNotStoredError as e:
                    return f"waiting for the {ref.kind} {ref.name}: {e.message}"
                within = (disk.offset, disk.size)
                size = int((shown.get("size") or {}).get("unpackedBytes") or disk.size)
                found.append(Attached(ref, disk.file, size, disk.format, within, cdrom))
                continue
            claim = claim_of(self.client, self.volumes, device)
            if claim is None or not claim.ready:
                return f"waiting for the {ref.kind} {ref.name}: its claim is missing"
            found.append(Attached(ref, str(claim.file), claim.size(), cdrom=cdrom, claim=claim))
        return found

    def _cbt_fields(self, on_overlays: bool, track: bool) -> dict[str, Any]:
        return {"changedBlockTracking": {"state": str(vmcbt.state(track, on_overlays))}}

    def _start(self, obj: VirtualMachine) -> Result:
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        admitted = admit(self.client, obj)
        if isinstance(admitted, Hold):
            reason, message = admitted.reason, admitted.message
            self._move(obj, MachinePhase.PENDING, reason, message, None, None, admitted.conditions)
            return Result.requeue(WATCH_SECONDS)
        attached = self._attached(obj)
        if isinstance(attached, str):
            self._move(obj, MachinePhase.PENDING, BLOCK_DEVICES_NOT_READY, attached)
            return Result.requeue(WATCH_SECONDS)
        seed = seed_of(self.client, obj)
        if isinstance(seed, str):
            held_by = {PROVISIONING_READY: (False, PROVISIONING_NOT_READY, seed)}
            pending = MachinePhase.PENDING
            self._move(obj, pending, PROVISIONING_NOT_READY, seed, None, None, held_by)
            return Result.requeue(WATCH_SECONDS)
        track = vmcbt.wanted(self.client, obj)
        writable = [a for a in attached if not a.ref.read_only]
        moving = self._move_cbt(obj, writable, track)
        if moving is not None:
            if track:
                self._move(
                    obj,
                    MachinePhase.STARTING,
                    STARTING,
                    "moving the disks onto their CBT overlays",
                    {"changedBlockTracking": {"state": "Initializing"}},
                )
            return moving
        launch = {
            "blockDevices": [a.status() for a in attached],
            "cbt": track and bool(writable),
            "resources": admitted.resources(obj),
            "spec": applied(obj.to_json()["spec"]),
        }
        try:
            spec = machine_spec(obj, admitted, self._disks(obj, attached, track), seed)
            launched = self.machines.start(namespace, name, spec, launch)
        except MachineError as e:
            self._move(obj, MachinePhase.DEGRADED, e.reason, e.message)
            return Result.requeue(RETRY_SECONDS)
        self._warn_unmet(obj, launched)
        networks, network_ready = network_status(obj)
        conditions = {
            PROVISIONING_READY: None if seed is None else (True, "ProvisioningReady", ""),
            NETWORK_READY: network_ready,
        }
        fields = {
            "blockDevices": launch["blockDevices"],
            "blockDeviceRefs": _listed(obj, attached, True),
            "networks": networks,
            **self._cbt_fields(launch["cbt"], track),
        }
        message = "QEMU is starting"
        self._move(obj, MachinePhase.STARTING, LAUNCHED, message, fields, None, conditions)
        return Result.requeue(STEP_SECONDS)

    def _move_cbt(
        self, obj: VirtualMachine, writable: list[Attached], track: bool
    ) -> Result | None:
        """Each writable disk moved on or off its CBT overlay by a worker, as `track` says: a
        Result while a worker moves one (or once one failed), None when each is as wanted. A
        worker that still runs is waited for, even where the disk is already as wanted (its
        overlay put in place, its result not yet written), so that its log is kept; one that
        moved the disk the other way (CBT wanted otherwise since it started) gives way to one
        that moves it back, before the disk is taken as it is."""
        moving = None
        for a in writable:
            assert a.claim is not None  # a writable device is a disk's claim
            job_id = vmcbt.cbt_job_id(obj, a.target)
            polled = self.jobs.poll(job_id, CbtResult)
            if isinstance(polled, Running):
                moving = Result.requeue(STEP_SECONDS)
                continue
            as_wanted = self.volumes.tracked(a.claim) == track
            if as_wanted or isinstance(polled, Succeeded):
                self.jobs.settle(job_id, tag(obj), keep=False)
            if as_wanted:
                continue
            outcome = step(self.jobs, job_id, vmcbt.cbt_job(a.claim, track), CbtResult)
            if isinstance(outcome, Failed):
                self.jobs.settle(job_id, tag(obj), keep=True)
                error = f"the disk {a.ref.name} was not moved {'onto' if track else 'off'} CBT"
                return Result.failed(CbtChangeError(f"{error}: {outcome.message}"))
            moving = Result.requeue(STEP_SECONDS)
        return moving

    def _disks(
        self, obj: VirtualMachine, attached: list[Attached], track: bool
    ) -> list[MachineDisk]:
        """The VM's disks in their boot order, its writable ones through their CBT overlays
        when `track`."""
        order = obj.spec.boot_ordered()
        return [
            MachineDisk(
                a.target,
                a.file,
                a.format,
                a.ref.read_only,
                a.within,
                a.cdrom,
                order.index(a.ref) + 1,
                tracked=track and not a.ref.read_only,
            )
            for a in attached
        ]

    def _warn_unmet(self, obj: VirtualMachine, launched: Launched) -> None:
        """A Warning for what the VM asked for that this start could not give it."""
        if launched.unweighed is not None:
            said = f"spec.cpu.coreFraction has no effect: {launched.unweighed}"
            self.client.event(obj, "Warning", "CoreFractionNotApplied", said)
        if launched.firmware_emulated:
            secure = obj.spec.bootloader is Bootloader.EFI_WITH_SECURE_BOOT
            said = (
                f"this host's KVM does not run the {obj.spec.bootloader} firmware (OVMF"
                f"{', with the SMM Secure Boot needs' if secure else ''}): the "
                "VM runs emulated (TCG), slower"
            )
            self.client.event(obj, "Warning", "FirmwareEmulated", said)
        if launched.hyperv_refused:
            said = "this host's KVM refuses Hyper-V's enlightenments: the Windows guest has none"
            self.client.event(obj, "Warning", "HyperVUnavailable", said)

    def _observe(self, obj: VirtualMachine) -> Result:
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        state = self.machines.state(namespace, name)
        if state is None:
            return Result.requeue(STEP_SECONDS)  # QEMU has not opened its monitors yet
        run_state = state.status
        if run_state == "shutdown":
            return self._stop(obj, GUEST_SHUTDOWN, "the guest powered itself off")
        launch = self.machines.launch(namespace, name)
        started = launch.get("spec")  # none from a QEMU an older daemon started
        changes = [] if started is None else restart_changes(started, obj.to_json()["spec"])
        automatic = obj.spec.disruptions.restart_approval_mode is RestartApprovalMode.AUTOMATIC
        if changes and automatic:
            return self._shut_down(obj, "restarting to apply changes", RESTARTING)
        phase = _phase_of(run_state)
        sockets = self.machines.sockets(obj)
        guest, agent_ready = self._guest(obj, sockets.agent)
        fields = {
            "qmpSocket": sockets.qmp,
            "guestAgentSocket": sockets.agent,
            "blockDevices": launch.get("blockDevices", []),
            "restartAwaitingChanges": changes or None,
            "versions": {"qemu": state.version},
            **guest,
            **self._cbt_fields(bool(launch.get("cbt")), vmcbt.wanted(self.client, obj)),
        }
        conditions = {
            AWAITING_RESTART: (True, "ChangesPendingRestart", AWAITING) if changes else None,
            MIGRATABLE: (False, "NoOtherNode", ONE_HOST),
            AGENT_READY: agent_ready,
        }
        message = f"QEMU is {run_state}"
        ready = phase != MachinePhase.DEGRADED
        self._move(obj, phase, str(phase), message, fields, ready, conditions)
        return Result.requeue(WATCH_SECONDS)

    def _guest(
        self, obj: VirtualMachine, agent: str | None
    ) -> tuple[dict[str, Any], Condition | None]:
        """What the guest agent said, as the machines last asked it: the status fields
        (guestOSInfo, ipAddress, networks' addresses) and the AgentReady condition (None without
        an agent channel)."""
        facts = self.machines.guest(obj)
        networks, _ = network_status(obj)
        for network in networks:
            network["ipAddress"] = facts.addresses.get(str(network["macAddress"]))
        main = next((n["ipAddress"] for n in networks if n["ipAddress"]), None)
        fields = {
            "guestOSInfo": facts.os_info or None,
            "ipAddress": main,
            "networks": [{k: v for k, v in n.items() if v is not None} for n in networks],
        }
        if agent is None:
            return fields, None
        if facts.answered:
            return fields, (True, "AgentReady", "")
        said = "the guest agent does not answer (is qemu-guest-agent installed and running?)"
        return fields, (False, "AgentNotReady", said)

    def _stop(self, obj: VirtualMachine, reason: str, message: str) -> Result:
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        obj = self._move(obj, MachinePhase.STOPPING, STOPPING, message)
        self.machines.stop(namespace, name)
        self._move(obj, MachinePhase.STOPPED, reason, message, _gone_fields())
        return Result.requeue(STEP_SECONDS)

    def _shut_down(self, obj: VirtualMachine, why: str, reason: str | None = None) -> Result:
        """Stop the running VM: its guest asked to power off, QEMU ended once it has or its
        grace period is over; Stopped with `reason`, else one saying how it ended."""
        due = self._power_off(obj)
        if isinstance(due, Result):
            message = f"{why}: the guest was asked to power off (ACPI)"
            self._move(obj, MachinePhase.STOPPING, STOPPING, message)
            return due
        ended, message = due
        return self._stop(obj, reason or ended, message or why)

    def _power_off(self, obj: VirtualMachine) -> Result | tuple[str, str]:
        """Press the guest's power button and wait up to its grace period for it to power off:
        a Result while it waits, else the reason and message QEMU is to be ended with (no
        message: at once, as a grace period of 0 asks)."""
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        grace = obj.spec.termination_grace_period_seconds
        if not grace:
            return STOPPED, ""
        pressed = self.machines.since_power_down(namespace, name)
        if pressed is None:
            with contextlib.suppress(MachineError):  # monitors not open yet: pressed next time
                self.machines.power_down(namespace, name)
            return Result.requeue(STEP_SECONDS)
        state = self.machines.state(namespace, name)
        if state is not None and state.status == "shutdown":
            return POWERED_OFF, "the guest powered off on the ACPI shutdown request"
        if pressed < grace:
            return Result.requeue(GRACE_POLL_SECONDS)
        return GRACE_OVER, (
            f"the guest did not power off within {grace} s of the ACPI shutdown request "
            "(spec.terminationGracePeriodSeconds): QEMU was ended"
        )

    def _stopped(self, obj: VirtualMachine) -> Result:
        """A VM that is not to run: its disks put on or off CBT as wanted (by workers), and
        Stopped."""
        attached = self._attached(obj)
        track = vmcbt.wanted(self.client, obj)
        on_overlays, moving = False, None
        if not isinstance(attached, str):
            writable = [a for a in attached if not a.ref.read_only]
            moving = self._move_cbt(obj, writable, track)
            on_overlays = track and bool(writable)
        kept = _phase(obj) == MachinePhase.STOPPED and (
            _reason(obj) != GUEST_SHUTDOWN or obj.spec.run_policy is not RunPolicy.ALWAYS_OFF
        )
        reason = _reason(obj) if kept else STOPPED
        message = "the VM is stopped"
        if isinstance(attached, str):  # its disks cannot be moved on or off CBT until then
            message = f"{message}; {attached}"
        elif kept and reason != STOPPED:  # how it stopped goes on being said
            message = _ready_message(obj) or message
        if _phase(obj) in (MachinePhase.RUNNING, MachinePhase.STARTING, MachinePhase.PAUSE):
            reason, message = QEMU_EXITED, self._exit_message(obj)
        cbt = self._cbt_fields(on_overlays, track)
        if moving is not None:  # Initializing onto the overlays, Enabled until off them
            state = CbtState.INITIALIZING if track else CbtState.ENABLED
            cbt = {"changedBlockTracking": {"state": str(state)}}
        fields = {**_gone_fields(), **cbt}
        if not isinstance(attached, str):
            fields["blockDeviceRefs"] = _listed(obj, attached, False)
        self._move(obj, MachinePhase.STOPPED, reason or STOPPED, message, fields)
        # a DataMoverConfig may come to select it
        return moving or Result.requeue(RETRY_SECONDS)

    def _exit_message(self, obj: VirtualMachine) -> str:
        lines = self.machines.last_words(obj.metadata.namespace or "", obj.metadata.name or "", 3)
        return "QEMU ended" + (f": {' | '.join(lines)}" if lines else "")

    def _watch_external(self, obj: VirtualMachine) -> Result:
        attached = self._attached(obj)
        files = [] if isinstance(attached, str) else [a.file for a in attached]
        try:
            socket = self.machines.sockets(obj).qmp
            external = self.machines.external(obj, files)
        except SocketRefusedError as e:
            fields = _gone_fields()
            self._move(obj, MachinePhase.DEGRADED, e.reason, e.message, fields)
            return Result.requeue(RETRY_SECONDS)
        except MachineError as e:  # no socket, or no QEMU on it
            fields = _gone_fields()
            self._move(obj, MachinePhase.STOPPED, QMP_UNREACHABLE, e.message, fields)
            return Result.requeue(WATCH_SECONDS)
        devices, on_overlays = [], False
        if not isinstance(attached, str):
            devices, on_overlays = _external_devices(attached, external.devices)
        run_state = external.status
        phase = _phase_of(run_state)
        fields = {
            "qmpSocket": socket,
            "blockDevices": devices,
            **self._cbt_fields(on_overlays, vmcbt.wanted(self.client, obj)),
        }
        message = f"QEMU is {run_state}"
        self._move(obj, phase, str(phase), message, fields, ready=phase != MachinePhase.DEGRADED)
        return Result.requeue(WATCH_SECONDS)

    def _delete(self, obj: VirtualMachine) -> Result:
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        if _phase(obj) != MachinePhase.TERMINATING:
            terminating = MachinePhase.TERMINATING
            obj = self._move(obj, terminating, TERMINATING, "being deleted")
        if not obj.spec.qmp_socket:
            due = self._power_off(obj) if self.machines.running(namespace, name) else None
            if isinstance(due, Result):
                return due
            try:
                self.machines.stop(namespace, name)
            except MachineError:
                return Result.requeue(RETRY_SECONDS)
            self.machines.remove(namespace, name)
        release(self.client, obj)
        return Result.done()


def _listed(obj: VirtualMachine, attached: list[Attached], on: bool) -> list[dict[str, Any]]:
    """The VM's devices as Deckhouse's `status.blockDeviceRefs` lists them."""
    order = obj.spec.boot_ordered()
    return [a.listed(on, order.index(a.ref) + 1) for a in attached]


def _phase_of(run_state: str) -> MachinePhase:
    """The phase a running QEMU's state shows: Running, Degraded when it stopped on an error
    (its own, the guest's panic, a disk's), Pause otherwise."""
    if run_state == "running":
        return MachinePhase.RUNNING
    if run_state in ("internal-error", "guest-panicked", "io-error"):
        return MachinePhase.DEGRADED
    return MachinePhase.PAUSE


def _gone_fields() -> dict[str, Any]:
    return {"qmpSocket": None, "guestAgentSocket": None, "blockDevices": None}


def _external_devices(
    attached: list[Attached], opened: dict[str, Device]
) -> tuple[list[dict[str, Any]], bool]:
    """The targets an external QEMU gives the VM's devices, and whether its disks have CBT."""
    devices, overlays = [], []
    for a in attached:
        device = opened.get(a.file)
        if device is None:
            continue
        devices.append({**a.status(), "target": device.target})
        if not a.ref.read_only:
            overlays.append(device.tracked)
    return devices, bool(overlays) and all(overlays)
