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
(see `machines`) is refused, and the VM Degraded, without a connection.

The sockets the daemon reaches a VM's QEMU by (`sockets_of`) are the ones it decided: status
shows them, and is never read back for them.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any

from diskferry.control.clock import Clock
from diskferry.control.host.images import ImageNotStoredError, ImageStore
from diskferry.control.host.volumes import Volumes
from diskferry.control.machines import MachineError, Machines, SocketRefusedError
from diskferry.control.model import Resource
from diskferry.control.node import node_name
from diskferry.control.quantity import format_bytes
from diskferry.control.reconcilers import vmcbt, vmguest
from diskferry.control.reconcilers.lifecycle import deleting, held, release
from diskferry.control.reconcilers.phases import READY, Condition, status_of, transition
from diskferry.control.reconcilers.sources import claim_of, kept_in_store
from diskferry.control.reconcilers.vmclass import class_of
from diskferry.control.reconcilers.vmlaunch import (
    NETWORK_READY,
    PROVISIONING,
    PROVISIONING_READY,
    Admitted,
    Hold,
    Seed,
    admit,
    launch_config,
    network_status,
    seed_of,
)
from diskferry.control.reconcilers.vmstatus import applied, replacing, restart_changes, stats
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.resources.virtualimage import ClusterVirtualImage, VirtualImage
from diskferry.control.resources.virtualmachine import (
    VIRTUAL_MACHINES,
    BlockDeviceKind,
    BlockDeviceSpecRef,
    MachinePhase,
    OsType,
    RestartApprovalMode,
    RunPolicy,
    VirtualMachine,
)
from diskferry.control.resources.virtualmachineclass import VirtualMachineClass
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.reconciler import Result
from diskferry.control.seeds import SeedError, write_seed
from diskferry.qemu import cbt
from diskferry.qemu.qmp import Qmp, QmpError
from diskferry.qemu.system import VmConfig, VmDisk, command, kvm_usable

WATCH_SECONDS = 2.0
STEP_SECONDS = 0.2
RETRY_SECONDS = 10.0
GUEST_SHUTDOWN = "GuestShutdown"
POWERED_OFF = "GuestPoweredOff"
GRACE_OVER = "GracePeriodOver"
RESTARTING = "Restarting"
AWAITING_RESTART = "AwaitingRestartToApplyConfiguration"
AWAITING = (
    "Waiting for the user to restart in order to apply the configuration changes (set "
    "spec.runPolicy AlwaysOff and back, or spec.disruptions.restartApprovalMode: Automatic)."
)
MIGRATABLE = "Migratable"
AGENT_READY = "AgentReady"
AGENT_SECONDS = 10.0
ONE_HOST = "this host is the one node: there is nowhere to migrate the VM to"
GRACE_POLL_SECONDS = 0.5
LAUNCHED = "QemuLaunched"
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


@dataclass(frozen=True)
class Sockets:
    """How the daemon reaches a VM's QEMU: its QMP socket, and its guest agent's (or None)."""

    qmp: str
    agent: str | None


def sockets_of(machines: Machines, vm: VirtualMachine) -> Sockets:
    """The VM's sockets as the daemon decided them: its own for a VM it runs, the checked
    `spec.qmpSocket` (and no agent) for one that runs elsewhere (SocketRefusedError when that
    is not one the daemon may use); never what the VM's status says."""
    if vm.spec.qmp_socket:
        return Sockets(machines.external_socket(vm.spec.qmp_socket), None)
    namespace, name = vm.metadata.namespace or "", vm.metadata.name or ""
    agent = machines.agent_socket(namespace, name) if vm.spec.enable_guest_agent else None
    return Sockets(str(machines.qmp_socket(namespace, name)), None if agent is None else str(agent))


@dataclass(frozen=True)
class Attached:
    """A block device of the VM and the file behind it: a disk's or an image's claim (raw), or
    the part of an image's layer in the store that holds its disk (`within`, in `format`)."""

    ref: BlockDeviceSpecRef
    file: str
    size: int
    format: str = "raw"
    within: tuple[int, int] | None = None
    cdrom: bool = False

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
        volumes: Volumes,
        store: ImageStore,
        machines: Machines,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.volumes = volumes
        self.machines = machines
        self.store = store
        self.clock = clock or Clock()
        self._asked: dict[tuple[str, str], tuple[float, vmguest.GuestFacts]] = {}

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
        self._move(obj, MachinePhase.DEGRADED, "QemuFailed", message, _gone_fields())
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
            found.append(Attached(ref, str(claim.file), claim.size(), cdrom=cdrom))
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
            self._move(obj, MachinePhase.PENDING, "BlockDevicesNotReady", attached)
            return Result.requeue(WATCH_SECONDS)
        seed = seed_of(self.client, obj)
        if isinstance(seed, str):
            held_by = {PROVISIONING_READY: (False, "ProvisioningNotReady", seed)}
            self._move(obj, MachinePhase.PENDING, "ProvisioningNotReady", seed, None, None, held_by)
            return Result.requeue(WATCH_SECONDS)
        track = vmcbt.wanted(self.client, obj)
        writable = [a for a in attached if not a.ref.read_only]
        if track and not all(vmcbt.tracked(a.file) for a in writable):
            obj = self._move(
                obj,
                MachinePhase.STARTING,
                "Starting",
                "moving the disks onto their CBT overlays",
                {"changedBlockTracking": {"state": "Initializing"}},
            )
        launch = {
            "blockDevices": [a.status() for a in attached],
            "cbt": track and bool(writable),
            "resources": admitted.resources(obj),
            "spec": applied(obj.to_json()["spec"]),
        }
        try:
            disks = self._disks(obj, attached, track, seed)
            config = launch_config(self.machines, obj, admitted, disks)
            share = (obj.spec.cpu.cores, admitted.core_fraction(obj))
            self.machines.start(namespace, name, command(config), launch, share)
        except (MachineError, SeedError) as e:
            self._move(obj, MachinePhase.DEGRADED, e.reason, e.message)
            return Result.requeue(RETRY_SECONDS)
        self._warn_unmet(obj, config)
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

    def _disks(
        self, obj: VirtualMachine, attached: list[Attached], track: bool, seed: Seed | None
    ) -> list[VmDisk]:
        """The VM's disks as QEMU opens them, in their boot order, its writable ones moved on
        or off CBT as `track` says, and its first-boot CD-ROM last (SeedError when it cannot be
        made)."""
        order = obj.spec.boot_ordered()
        disks = []
        for a in attached:
            path, fmt = (a.file, a.format) if a.ref.read_only else vmcbt.prepare(a.file, track)
            boot = order.index(a.ref) + 1
            disks.append(VmDisk(a.target, path, fmt, a.ref.read_only, a.within, a.cdrom, boot))
        if seed is not None:
            namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
            path = self.machines.directory(namespace, name) / f"{PROVISIONING}.iso"
            write_seed(path, seed.label, seed.files)
            disks.append(VmDisk(PROVISIONING, str(path), read_only=True, cdrom=True))
        return disks

    def _warn_unmet(self, obj: VirtualMachine, config: VmConfig) -> None:
        """A Warning for what the VM asked for that this start could not give it."""
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        unweighed = self.machines.unweighed(namespace, name)
        if unweighed is not None:
            said = f"spec.cpu.coreFraction has no effect: {unweighed}"
            self.client.event(obj, "Warning", "CoreFractionNotApplied", said)
        if config.firmware is not None and not config.kvm and kvm_usable():
            said = (
                f"this host's KVM does not run the {obj.spec.bootloader} firmware (OVMF"
                f"{', with the SMM Secure Boot needs' if config.firmware_secure else ''}): the "
                "VM runs emulated (TCG), slower"
            )
            self.client.event(obj, "Warning", "FirmwareEmulated", said)
        if obj.spec.os_type is OsType.WINDOWS and config.kvm and not config.hyperv:
            said = "this host's KVM refuses Hyper-V's enlightenments: the Windows guest has none"
            self.client.event(obj, "Warning", "HyperVUnavailable", said)

    def _observe(self, obj: VirtualMachine) -> Result:
        namespace, name = obj.metadata.namespace or "", obj.metadata.name or ""
        if not self.machines.control_socket(namespace, name).exists():
            return Result.requeue(STEP_SECONDS)  # QEMU has not opened its monitors yet
        try:
            with self.machines.monitor(namespace, name) as qmp:
                run_state = qmp.command("query-status")["status"]
                version = qmp.command("query-version")["qemu"]
        except QmpError:
            return Result.requeue(STEP_SECONDS)
        if run_state == "shutdown":
            return self._stop(obj, GUEST_SHUTDOWN, "the guest powered itself off")
        launch = self.machines.launch(namespace, name)
        started = launch.get("spec")  # none from a QEMU an older daemon started
        changes = [] if started is None else restart_changes(started, obj.to_json()["spec"])
        automatic = obj.spec.disruptions.restart_approval_mode is RestartApprovalMode.AUTOMATIC
        if changes and automatic:
            return self._shut_down(obj, "restarting to apply changes", RESTARTING)
        phase = _phase_of(run_state)
        sockets = sockets_of(self.machines, obj)
        guest, agent_ready = self._guest(obj, sockets.agent)
        fields = {
            "qmpSocket": sockets.qmp,
            "guestAgentSocket": sockets.agent,
            "blockDevices": launch.get("blockDevices", []),
            "restartAwaitingChanges": changes or None,
            "versions": {"qemu": f"{version['major']}.{version['minor']}.{version['micro']}"},
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
        """What the guest agent said, asked at most every AGENT_SECONDS: the status fields
        (guestOSInfo, ipAddress, networks' addresses) and the AgentReady condition (None without
        an agent channel)."""
        key = (obj.metadata.namespace or "", obj.metadata.name or "")
        asked = self._asked.get(key)
        if asked is None or time.monotonic() - asked[0] > AGENT_SECONDS:
            asked = (time.monotonic(), vmguest.ask(agent))
            self._asked[key] = asked
        facts = asked[1]
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
        obj = self._move(obj, MachinePhase.STOPPING, "Stopping", message)
        self.machines.stop(namespace, name)
        self._move(obj, MachinePhase.STOPPED, reason, message, _gone_fields())
        return Result.requeue(STEP_SECONDS)

    def _shut_down(self, obj: VirtualMachine, why: str, reason: str | None = None) -> Result:
        """Stop the running VM: its guest asked to power off, QEMU ended once it has or its
        grace period is over; Stopped with `reason`, else one saying how it ended."""
        due = self._power_off(obj)
        if isinstance(due, Result):
            message = f"{why}: the guest was asked to power off (ACPI)"
            self._move(obj, MachinePhase.STOPPING, "Stopping", message)
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
            return "Stopped", ""
        pressed = self.machines.since_power_down(namespace, name)
        if pressed is None:
            with contextlib.suppress(QmpError):  # monitors not open yet: pressed next time
                self.machines.power_down(namespace, name)
            return Result.requeue(STEP_SECONDS)
        try:
            with self.machines.monitor(namespace, name) as qmp:
                off = qmp.command("query-status")["status"] == "shutdown"
        except QmpError:
            off = False
        if off:
            return POWERED_OFF, "the guest powered off on the ACPI shutdown request"
        if pressed < grace:
            return Result.requeue(GRACE_POLL_SECONDS)
        return GRACE_OVER, (
            f"the guest did not power off within {grace} s of the ACPI shutdown request "
            "(spec.terminationGracePeriodSeconds): QEMU was ended"
        )

    def _stopped(self, obj: VirtualMachine) -> Result:
        """A VM that is not to run: its disks put on or off CBT as wanted, and Stopped."""
        attached = self._attached(obj)
        track = vmcbt.wanted(self.client, obj)
        on_overlays = False
        if not isinstance(attached, str):
            writable = [a for a in attached if not a.ref.read_only]
            for a in writable:
                vmcbt.prepare(a.file, track)
            on_overlays = track and bool(writable)
        kept = _phase(obj) == MachinePhase.STOPPED and (
            _reason(obj) != GUEST_SHUTDOWN or obj.spec.run_policy is not RunPolicy.ALWAYS_OFF
        )
        reason = _reason(obj) if kept else "Stopped"
        message = "the VM is stopped"
        if isinstance(attached, str):  # its disks cannot be moved on or off CBT until then
            message = f"{message}; {attached}"
        elif kept and reason != "Stopped":  # how it stopped goes on being said
            message = _ready_message(obj) or message
        if _phase(obj) in (MachinePhase.RUNNING, MachinePhase.STARTING, MachinePhase.PAUSE):
            reason, message = "QemuExited", self._exit_message(obj)
        fields = {**_gone_fields(), **self._cbt_fields(on_overlays, track)}
        if not isinstance(attached, str):
            fields["blockDeviceRefs"] = _listed(obj, attached, False)
        self._move(obj, MachinePhase.STOPPED, reason or "Stopped", message, fields)
        return Result.requeue(RETRY_SECONDS)  # a DataMoverConfig may come to select it

    def _exit_message(self, obj: VirtualMachine) -> str:
        lines = self.machines.last_words(obj.metadata.namespace or "", obj.metadata.name or "", 3)
        return "QEMU ended" + (f": {' | '.join(lines)}" if lines else "")

    def _watch_external(self, obj: VirtualMachine) -> Result:
        try:
            socket = sockets_of(self.machines, obj).qmp
            with Qmp(socket, timeout=WATCH_SECONDS) as qmp:
                run_state = qmp.command("query-status")["status"]
                nodes = qmp.command("query-named-block-nodes", flat=True)
        except SocketRefusedError as e:
            fields = _gone_fields()
            self._move(obj, MachinePhase.DEGRADED, e.reason, e.message, fields)
            return Result.requeue(RETRY_SECONDS)
        except (MachineError, QmpError) as e:  # no socket, or no QEMU on it
            fields = _gone_fields()
            self._move(obj, MachinePhase.STOPPED, "QmpUnreachable", e.message, fields)
            return Result.requeue(WATCH_SECONDS)
        attached = self._attached(obj)
        devices, on_overlays = [], False
        if not isinstance(attached, str):
            devices, on_overlays = _external_devices(attached, nodes)
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
        self._asked.pop((namespace, name), None)
        if _phase(obj) != MachinePhase.TERMINATING:
            terminating = MachinePhase.TERMINATING
            obj = self._move(obj, terminating, "Terminating", "being deleted")
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
    attached: list[Attached], nodes: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], bool]:
    """The targets an external QEMU gives the VM's devices, and whether its disks have CBT."""
    devices, overlays = [], []
    for a in attached:
        names = {a.file, a.file + cbt.SUFFIX}
        node = next((n for n in nodes if n.get("file") in names), None)
        if node is None:
            continue
        devices.append({**a.status(), "target": node["node-name"]})
        if not a.ref.read_only:
            overlays.append(node.get("drv") == "qcow2")
    return devices, bool(overlays) and all(overlays)
