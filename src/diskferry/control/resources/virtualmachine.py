"""VirtualMachine: Deckhouse's `v1alpha2` shape, its whole spec, run by diskferry on one host.

A VM needs only `spec.blockDeviceRefs`; the rest defaults as Deckhouse's does (`runPolicy`
AlwaysOnUnlessStoppedManually) or as diskferry's (1 core, 256Mi). VirtualDisks attach
writable; VirtualImages and ClusterVirtualImages read-only, as Deckhouse attaches them: a
CD-ROM for an ISO, else a disk (one kept in the image store is opened in place there). Each
field says what it does on one host; those that place a VM in a cluster (tolerations, topology
spread, VM affinity, priority) are taken with no effect (`no_effect`). `spec.enableGuestAgent`
adds a guest-agent channel; `spec.qmpSocket` names the QMP socket of a QEMU that something else
runs (in DATA_DIR/vm-sockets), which diskferry then only watches. Besides Deckhouse's phases
and status, the status has KubeVirt's `changedBlockTracking.state`, and, while the VM runs,
`qmpSocket` and each disk's QEMU `target` in `blockDevices`: shown to users, never read back
by the daemon.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from diskferry.control.resources.common import ApiVersion, Quantity, invalid
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    READY,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.noeffect import no_effect
from diskferry.control.resources.placement import (
    NO_TAINTS,
    ONE_NODE,
    Toleration,
    TopologySpreadConstraint,
    VmAffinity,
)
from diskferry.control.resources.quantity import parse_quantity

CBT_LABEL = "diskferry.io/changed-block-tracking"
"""A VM labelled with this key and "true" gets CBT whatever the DataMoverConfig selects."""
CLASS_READY = "VirtualMachineClassReady"
SIZING = "SizingPolicyMatched"
PROVISIONING_READY = "ProvisioningReady"
NETWORK_READY = "NetworkReady"
AGENT_READY = "AgentReady"
AWAITING_RESTART = "AwaitingRestartToApplyConfiguration"
MIGRATABLE = "Migratable"


class RunPolicy(StrEnum):
    """When the VM runs: always, never, as left, or always until stopped from inside."""

    ALWAYS_ON = "AlwaysOn"
    ALWAYS_OFF = "AlwaysOff"
    MANUAL = "Manual"
    ALWAYS_ON_UNLESS_STOPPED_MANUALLY = "AlwaysOnUnlessStoppedManually"


class BlockDeviceKind(StrEnum):
    """The kinds a VM can attach."""

    VIRTUAL_DISK = "VirtualDisk"
    VIRTUAL_IMAGE = "VirtualImage"
    CLUSTER_VIRTUAL_IMAGE = "ClusterVirtualImage"


class BlockDeviceSpecRef(ApiModel):
    """One disk or image the VM attaches; the list's order is the boot order."""

    kind: BlockDeviceKind = Field(
        description="VirtualDisk (read-write), VirtualImage or ClusterVirtualImage (read-only)."
    )
    name: str = Field(min_length=1, description="The object's name.")
    boot_order: int | None = Field(
        default=None,
        alias="bootOrder",
        ge=1,
        description="The device's boot priority (lower first); devices without one boot after "
        "those with one, in the list's order.",
    )

    @property
    def read_only(self) -> bool:
        """Whether it attaches read-only (an image: a CD-ROM for an ISO, else a disk)."""
        return self.kind is not BlockDeviceKind.VIRTUAL_DISK


CORE_FRACTION = r"^(Auto|(100|[1-9][0-9]?)%)$"


class CpuSpec(ApiModel):
    """The VM's virtual CPUs."""

    cores: int = Field(
        default=1,
        ge=1,
        le=256,
        description="The number of virtual cores, 1 to 256 (default 1); the class's sizing "
        "policies may narrow it.",
    )
    core_fraction: str | None = Field(
        default=None,
        alias="coreFraction",
        pattern=CORE_FRACTION,
        description="The share of each core the VM is guaranteed when the host is busy, 1% to "
        "100% (or Auto): its QEMU's CPU weight in a cgroup of its own (cores times the "
        "fraction of a plain process's). Unset, the class's policy's defaultCoreFraction, else "
        "100%; Auto, which Deckhouse hands to its autoscaler, gets the same here.",
    )


class MemorySpec(ApiModel):
    """The VM's memory."""

    size: Quantity = Field(
        default="256Mi",
        description="The guest's memory, a quantity of bytes with a suffix Mi, Gi (powers of "
        "1024) or M, G (powers of 1000), such as 4Gi. Default 256Mi.",
    )

    @property
    def size_bytes(self) -> int:
        """The memory in bytes."""
        return parse_quantity(self.size)


class ProvisioningType(StrEnum):
    """How the guest is configured at its first boot."""

    USER_DATA = "UserData"
    USER_DATA_REF = "UserDataRef"
    SYSPREP_REF = "SysprepRef"


class SecretRef(ApiModel):
    """A Secret in the VM's namespace."""

    kind: Literal["Secret"] = Field(default="Secret", description="Secret, the only kind.")
    name: str = Field(min_length=1, description="The Secret's name.")


USER_DATA_LIMIT = 2048


class Provisioning(ApiModel):
    """First-boot configuration, given to the guest on a CD-ROM of its own: cloud-init's
    NoCloud seed (label `cidata`: user-data, meta-data) or a Windows answer file's."""

    type: ProvisioningType = Field(
        description="UserData (cloud-init in `userData`), UserDataRef (cloud-init in the "
        "Secret's `userData` key) or SysprepRef (the Secret's files, autounattend.xml and "
        "unattend.xml, on the CD-ROM); required."
    )
    user_data: str | None = Field(
        default=None,
        alias="userData",
        description=f"cloud-init user data, at most {USER_DATA_LIMIT} bytes.",
    )
    user_data_ref: SecretRef | None = Field(
        default=None,
        alias="userDataRef",
        description="The Secret with the cloud-init user data under `userData` (or `value`).",
    )
    sysprep_ref: SecretRef | None = Field(
        default=None, alias="sysprepRef", description="The Secret with the Windows answer files."
    )

    @model_validator(mode="after")
    def _has_its_source(self) -> Provisioning:
        wanted = {
            ProvisioningType.USER_DATA: "userData",
            ProvisioningType.USER_DATA_REF: "userDataRef",
            ProvisioningType.SYSPREP_REF: "sysprepRef",
        }[self.type]
        given = {
            "userData": self.user_data is not None,
            "userDataRef": self.user_data_ref is not None,
            "sysprepRef": self.sysprep_ref is not None,
        }
        if not given[wanted]:
            raise invalid(f"type {self.type} requires {wanted}")
        others = sorted(name for name, set_ in given.items() if set_ and name != wanted)
        if others:
            raise invalid(f"type {self.type} cannot have {' or '.join(others)}")
        if self.user_data is not None and len(self.user_data.encode()) > USER_DATA_LIMIT:
            raise invalid(
                f"`userData` exceeds {USER_DATA_LIMIT} byte limit; should use `userDataRef` for "
                "larger data."
            )
        return self


class Bootloader(StrEnum):
    """The VM's firmware."""

    BIOS = "BIOS"
    EFI = "EFI"
    EFI_WITH_SECURE_BOOT = "EFIWithSecureBoot"


class OsType(StrEnum):
    """The guest's family, which chooses the devices it gets."""

    WINDOWS = "Windows"
    GENERIC = "Generic"
    LEGACY = "Legacy"


class RestartApprovalMode(StrEnum):
    """How changes that need a restart are applied to a running VM."""

    MANUAL = "Manual"
    AUTOMATIC = "Automatic"


class Disruptions(ApiModel):
    """How changes that need a restart are applied."""

    restart_approval_mode: RestartApprovalMode = Field(
        default=RestartApprovalMode.MANUAL,
        alias="restartApprovalMode",
        description="Manual (the default): a running VM waits for its next start, its "
        "AwaitingRestartToApplyConfiguration condition True; Automatic: it is restarted to "
        "apply them.",
    )


class LiveMigrationPolicy(StrEnum):
    """How a live migration may slow or force the guest."""

    ALWAYS_SAFE = "AlwaysSafe"
    PREFER_SAFE = "PreferSafe"
    ALWAYS_FORCED = "AlwaysForced"
    PREFER_FORCED = "PreferForced"


class NetworkType(StrEnum):
    """The networks a VM joins."""

    MAIN = "Main"
    NETWORK = "Network"
    CLUSTER_NETWORK = "ClusterNetwork"


class NetworkSpec(ApiModel):
    """A network interface of the VM."""

    type: NetworkType = Field(
        description="Main (the one network this host gives: QEMU's user-mode network, NAT to "
        "the host's), Network or ClusterNetwork (Deckhouse's extra networks: none here, the "
        "VM's NetworkReady condition says so); required."
    )
    id: int | None = Field(default=None, description="The interface's number.")
    name: str | None = no_effect(
        "this host has no extra networks", "The network joined.", default=None, min_length=1
    )
    virtual_machine_mac_address_name: str | None = no_effect(
        "the MAC address comes from the VM's uid here",
        "The VirtualMachineMACAddress object of the interface.",
        default=None,
        alias="virtualMachineMACAddressName",
        min_length=1,
    )
    ip_address_name: str | None = no_effect(
        "this host has no extra networks",
        "The IPAddress object of a static address on an extra network.",
        default=None,
        alias="ipAddressName",
        min_length=1,
    )


class GpuSpec(ApiModel):
    """A GPU passed through."""

    gpu_class_name: str = Field(
        alias="gpuClassName", min_length=1, max_length=253, description="The GPUClass."
    )


class UsbDeviceSpec(ApiModel):
    """A USB device passed through."""

    name: str = Field(min_length=1, description="The USBDevice object in the namespace.")


class VirtualMachineSpec(ApiModel):
    """The VM wanted."""

    virtual_machine_class_name: str | None = Field(
        default=None,
        alias="virtualMachineClassName",
        min_length=1,
        description="The VirtualMachineClass giving the CPU model, the nodes and the sizing "
        "policy. Unset, the class annotated virtualmachineclass.diskferry.io/is-default-class: "
        '"true"; with none, the host\'s CPU and no sizing policy. A class that does not exist '
        "keeps the VM Pending.",
    )
    run_policy: RunPolicy = Field(
        default=RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY,
        alias="runPolicy",
        description="AlwaysOn (started again whenever it ends), AlwaysOff, Manual (neither "
        "started nor stopped), AlwaysOnUnlessStoppedManually (the default: started, and again "
        "after a crash, unless the guest powered itself off or it was stopped through the "
        "run policy AlwaysOff; set another policy and back to start it again).",
    )
    block_device_refs: list[BlockDeviceSpecRef] = Field(
        alias="blockDeviceRefs",
        min_length=1,
        max_length=16,
        description="The disks and images attached, 1 to 16, in boot order; required.",
    )
    cpu: CpuSpec = Field(default_factory=CpuSpec, description="The virtual CPUs.")
    memory: MemorySpec = Field(default_factory=MemorySpec, description="The memory.")
    provisioning: Provisioning | None = Field(
        default=None, description="First-boot configuration (cloud-init, sysprep)."
    )
    bootloader: Bootloader = Field(
        default=Bootloader.BIOS,
        description="BIOS (the default, SeaBIOS), EFI (OVMF), EFIWithSecureBoot (OVMF with "
        "Secure Boot and Microsoft's keys, on a q35 machine with SMM); the EFI variables are "
        "kept in the VM's folder.",
    )
    os_type: OsType = Field(
        default=OsType.GENERIC,
        alias="osType",
        description="Generic (the default), Windows (Hyper-V enlightenments under KVM), Legacy "
        "(no paravirtualized devices without enableParavirtualization; BIOS only, no "
        "provisioning).",
    )
    enable_paravirtualization: bool = Field(
        default=True,
        alias="enableParavirtualization",
        description="virtio devices (the default: disks on virtio-scsi, a virtio-net NIC); "
        "false: disks on SATA (IDE for Legacy, at most 4) and an e1000 NIC, for guests without "
        "virtio drivers.",
    )
    disruptions: Disruptions = Field(
        default_factory=Disruptions, description="How changes needing a restart are applied."
    )
    termination_grace_period_seconds: int = Field(
        default=60,
        alias="terminationGracePeriodSeconds",
        ge=0,
        description="Seconds a stopping VM's guest has to power off after the ACPI shutdown "
        "request (60); then QEMU is ended. 0 ends QEMU at once.",
    )
    networks: list[NetworkSpec] = Field(
        default_factory=lambda: [NetworkSpec(type=NetworkType.MAIN)],
        description="The network interfaces; the Main network only by default.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        alias="nodeSelector",
        description="Node labels the VM must run on, as a Pod's: a VM whose selector this "
        "host's node (kubernetes.io/hostname, kubernetes.io/os, kubernetes.io/arch) does not "
        "meet stays Pending.",
    )
    affinity: VmAffinity | None = Field(
        default=None, description="Placement rules towards nodes and other VMs and Pods."
    )
    tolerations: list[Toleration] = no_effect(
        NO_TAINTS, "Taints the VM tolerates, as a Pod's.", default_factory=list
    )
    topology_spread_constraints: list[TopologySpreadConstraint] = no_effect(
        ONE_NODE,
        "How the VM spreads with others over topology domains.",
        default_factory=list,
        alias="topologySpreadConstraints",
    )
    priority_class_name: str | None = no_effect(
        "no scheduler ranks VMs on this host",
        "The PriorityClass of the VM's Pod.",
        default=None,
        alias="priorityClassName",
        min_length=1,
    )
    live_migration_policy: LiveMigrationPolicy = no_effect(
        "a VM never migrates off the one host",
        "How a live migration may slow or force the guest: AlwaysSafe, PreferSafe (the "
        "default), AlwaysForced, PreferForced.",
        default=LiveMigrationPolicy.PREFER_SAFE,
        alias="liveMigrationPolicy",
    )
    virtual_machine_ip_address_name: str | None = no_effect(
        "the Main network's address is QEMU's user-mode network's, which no object holds",
        "The VirtualMachineIPAddress object holding the main address.",
        default=None,
        alias="virtualMachineIPAddressName",
        min_length=1,
    )
    gpus: list[GpuSpec] = no_effect(
        "this host passes no GPU through",
        "GPUs passed through.",
        default_factory=list,
        max_length=16,
    )
    usb_devices: list[UsbDeviceSpec] = no_effect(
        "this host passes no USB device through",
        "USB devices passed through.",
        default_factory=list,
        alias="usbDevices",
        max_length=8,
    )
    enable_guest_agent: bool = Field(
        default=True,
        alias="enableGuestAgent",
        description="A guest-agent channel (true, as every Deckhouse VM has): its guest's "
        "qemu-guest-agent, when it answers, gives the VM's guestOSInfo and addresses, and "
        "freezes the guest for backups and snapshots.",
    )
    qmp_socket: str | None = Field(
        default=None,
        alias="qmpSocket",
        pattern=r"^/\S+$",
        description=(
            "The QMP socket of a QEMU something else runs, which diskferry then only watches: "
            "an absolute path in the daemon's DATA_DIR/vm-sockets (or a folder below it), a "
            "Unix socket owned by root or the daemon's user, reached through no symlink. Any "
            "other socket is refused (the VM is Degraded, QmpSocketRefused) unconnected."
        ),
    )

    @model_validator(mode="after")
    def _legacy_rules(self) -> VirtualMachineSpec:
        if self.os_type is not OsType.LEGACY:
            return self
        if self.bootloader is not Bootloader.BIOS:
            raise invalid("The Legacy osType requires the BIOS bootloader.")
        if self.provisioning is not None:
            raise invalid(
                "The Legacy osType does not support provisioning: such operating systems have "
                "no cloud-init or Sysprep support."
            )
        if not self.enable_paravirtualization and len(self.block_device_refs) > 4:
            raise invalid(
                "The Legacy osType with enableParavirtualization=false supports at most 4 block "
                "devices."
            )
        return self

    def boot_ordered(self) -> list[BlockDeviceSpecRef]:
        """The block devices in the order they boot: those with a bootOrder by it, then the
        rest in the list's order."""
        numbered = sorted(
            (r for r in self.block_device_refs if r.boot_order is not None),
            key=lambda r: r.boot_order or 0,
        )
        return [*numbered, *(r for r in self.block_device_refs if r.boot_order is None)]


class MachinePhase(StrEnum):
    """Where a VM is in its life, as Deckhouse names it (never Migrating on one host)."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    PAUSE = "Pause"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    DEGRADED = "Degraded"
    TERMINATING = "Terminating"
    MIGRATING = "Migrating"


class CbtState(StrEnum):
    """KubeVirt's changed-block-tracking states."""

    DISABLED = "Disabled"
    PENDING_RESTART = "PendingRestart"
    INITIALIZING = "Initializing"
    ENABLED = "Enabled"


class ChangedBlockTrackingStatus(ApiModel):
    """Whether the VM's disks are tracked (KubeVirt's changedBlockTracking)."""

    state: CbtState = Field(
        default=CbtState.DISABLED,
        description="Disabled (the default: no tracking), PendingRestart (tracking is wanted: "
        "the disks take it at the VM's next start, or at once while it is stopped), Enabled "
        "(every writable disk is tracked, so backups can be incremental). KubeVirt's "
        "Initializing does not occur here. Tracking is wanted for a VM the DataMoverConfig's "
        "changedBlockTrackingLabelSelectors select, or labelled "
        'diskferry.io/changed-block-tracking: "true".',
    )


class BlockDeviceStatus(ApiModel):
    """An attached disk: what it is and its node name and device id in QEMU."""

    kind: BlockDeviceKind = Field(description="VirtualDisk, VirtualImage or ClusterVirtualImage.")
    name: str = Field(description="The object's name.")
    target: str = Field(description="The disk's block node name in the VM's QEMU.")
    read_only: bool = Field(
        alias="readOnly", description="Whether it is attached read-only (an image)."
    )


class BlockDeviceStatusRef(ApiModel):
    """A device of the VM as Deckhouse lists it: whether it is attached, its size."""

    kind: BlockDeviceKind = Field(description="VirtualDisk, VirtualImage or ClusterVirtualImage.")
    name: str = Field(description="The object's name.")
    size: str = Field(description="The device's size, as a quantity.")
    attached: bool = Field(description="Whether the running VM has it attached.")
    boot_order: int | None = Field(
        default=None,
        alias="bootOrder",
        description="Its place in the boot order, from 1, as the VM boots its devices.",
    )
    target: str | None = Field(
        default=None,
        description="The device's name in the guest (Deckhouse's sda, vdb, ...); never set "
        "here: the guest names its devices.",
    )
    hotplugged: bool | None = Field(
        default=None,
        description="Whether it was attached while the VM ran (Deckhouse's field); never set "
        "here: devices attach at the start.",
    )


class CpuTopology(ApiModel):
    """How the cores are laid out, as Deckhouse lays them out: one socket up to 16 cores,
    then 2, 4 or 8 sockets."""

    sockets: int = Field(description="The number of sockets.")
    cores_per_socket: int = Field(alias="coresPerSocket", description="The cores of each socket.")


class CpuResources(ApiModel):
    """The CPU in effect."""

    cores: int = Field(description="The number of cores.")
    core_fraction: str | None = Field(
        default=None,
        alias="coreFraction",
        description="The share of each core the VM is guaranteed, as a percent (50%).",
    )
    requested_cores: str | None = Field(
        default=None,
        alias="requestedCores",
        description="The CPU the VM is guaranteed, cores times the fraction, as a quantity of "
        "cores (2, or 500m for half a core).",
    )
    runtime_overhead: str | None = Field(
        default=None,
        alias="runtimeOverhead",
        description="The CPU Deckhouse's runtime adds to the VM; never set here.",
    )
    topology: CpuTopology | None = None


class MemoryResources(ApiModel):
    """The memory in effect."""

    size: str = Field(description="The guest's memory, as a quantity (256Mi).")
    runtime_overhead: str | None = Field(
        default=None,
        alias="runtimeOverhead",
        description="The memory Deckhouse's runtime adds to the VM; never set here.",
    )


class Resources(ApiModel):
    """The resources the VM runs with, or would run with while it does not run: the spec's,
    completed from its class."""

    cpu: CpuResources = Field(description="The CPU.")
    memory: MemoryResources = Field(description="The memory.")


class LaunchTimeDuration(ApiModel):
    """How long the last start took, by step, each in seconds (12s); cleared when the VM is
    Pending or Stopped."""

    waiting_for_dependencies: str | None = Field(
        default=None,
        alias="waitingForDependencies",
        description="From Pending to Starting: waiting for its class, disks and provisioning.",
    )
    virtual_machine_starting: str | None = Field(
        default=None,
        alias="virtualMachineStarting",
        description="From Starting to Running: its QEMU starting.",
    )
    guest_os_agent_starting: str | None = Field(
        default=None,
        alias="guestOSAgentStarting",
        description="From Running until the guest agent answered (Deckhouse's field); never "
        "set here.",
    )


class PhaseTransition(ApiModel):
    """A phase entered, and when."""

    phase: MachinePhase = Field(description="The phase entered.")
    timestamp: datetime = Field(description="When, in RFC 3339.")


class Stats(ApiModel):
    """Timing statistics."""

    last_start_time: datetime | None = Field(
        default=None,
        alias="lastStartTime",
        description="When the VM last became Running (the Uptime column); unset while it does "
        "not run.",
    )
    launch_time_duration: LaunchTimeDuration | None = Field(
        default=None, alias="launchTimeDuration"
    )
    phases_transitions: list[PhaseTransition] = Field(
        default_factory=list,
        alias="phasesTransitions",
        description="The last 5 phases the VM entered, oldest first.",
    )


class NetworkStatus(ApiModel):
    """A network interface as attached."""

    type: NetworkType = Field(description="Main, Network or ClusterNetwork, as in the spec.")
    id: int | None = Field(default=None, description="The interface's number.")
    name: str | None = Field(
        default=None, description="The network's name, for Network and ClusterNetwork."
    )
    mac_address: str | None = Field(
        default=None,
        alias="macAddress",
        description="The interface's MAC address, derived from the VM's uid so that it stays "
        "the same across restarts.",
    )
    ip_address: str | None = Field(
        default=None,
        alias="ipAddress",
        description="The interface's first IPv4 address, as the guest agent reports it.",
    )
    virtual_machine_mac_address_name: str | None = Field(
        default=None,
        alias="virtualMachineMACAddressName",
        description="The VirtualMachineMACAddress object of the interface (Deckhouse's); "
        "never set here.",
    )


class Versions(ApiModel):
    """The hypervisor's versions."""

    qemu: str | None = Field(
        default=None, description="The version of the QEMU running the VM (9.2.0)."
    )
    libvirt: str | None = Field(
        default=None, description="The libvirt version (Deckhouse's); never set here."
    )


class VirtualMachineStatus(Status):
    """What was observed of the VM."""

    phase: MachinePhase | None = Field(
        default=None,
        description="Pending (waiting for its class, disks, images or provisioning Secret, or "
        "a node that meets its placement: the Ready condition says which), Starting (its QEMU "
        "starting), Running, Pause (QEMU paused), Stopping (its guest asked to power off), "
        "Stopped, Degraded (QEMU failed or stopped on an error; started again while the run "
        "policy wants it), Terminating (being deleted). Deckhouse's Migrating does not occur "
        "on one host.",
    )
    node_name: str | None = Field(
        default=None,
        alias="nodeName",
        description="The host the VM runs on, while it has a QEMU (Starting to Stopping).",
    )
    ip_address: str | None = Field(
        default=None,
        alias="ipAddress",
        description="The Main interface's IPv4 address, as the guest agent reports it; unset "
        "without an answering agent.",
    )
    guest_os_info: dict[str, Any] | None = Field(
        default=None,
        alias="guestOSInfo",
        description="The guest's operating system as its agent reports it, in KubeVirt's names: "
        "id, name, prettyName, version, versionId, machine, kernelRelease, kernelVersion.",
    )
    resources: Resources | None = None
    stats: Stats | None = None
    networks: list[NetworkStatus] | None = Field(
        default=None, description="The VM's network interfaces, in the spec's order."
    )
    versions: Versions | None = None
    block_device_refs: list[BlockDeviceStatusRef] | None = Field(
        default=None,
        alias="blockDeviceRefs",
        description="The spec's disks and images as attached, in Deckhouse's shape.",
    )
    restart_awaiting_changes: list[dict[str, Any]] | None = Field(
        default=None,
        alias="restartAwaitingChanges",
        description="The spec's changes a running VM applies only at its next start, as "
        "Deckhouse lists them: each with operation (add, remove, replace), path, currentValue "
        "and desiredValue. Unset when there are none.",
    )
    qmp_socket: str | None = Field(
        default=None,
        alias="qmpSocket",
        description="The QMP socket of the VM's QEMU, while it runs, for tools that speak QMP.",
    )
    guest_agent_socket: str | None = Field(
        default=None,
        alias="guestAgentSocket",
        description="The socket of the VM's guest-agent channel, while it runs (enableGuestAgent).",
    )
    block_devices: list[BlockDeviceStatus] | None = Field(
        default=None,
        alias="blockDevices",
        description="The disks and images attached to the running VM's QEMU, with their QEMU "
        "node names; unset while it does not run.",
    )
    changed_block_tracking: ChangedBlockTrackingStatus | None = Field(
        default=None, alias="changedBlockTracking"
    )


class VirtualMachine(Resource):
    """A virtual machine on VirtualDisks and images, run as a QEMU process.

    Deckhouse's v1alpha2 shape: the guides' manifests apply unchanged, and a VM needs only
    spec.blockDeviceRefs. Each VM runs as qemu-system-x86_64 (KVM when /dev/kvm opens and a QEMU
    on it with the host's CPU starts, TCG otherwise, as on a nested KVM that refuses the host CPU's
    MSRs; -nodefaults -nographic) in DATA_DIR/vms/NAMESPACE/NAME/: qmp.sock for backups and users,
    control.sock for the controller alone (so a long session on qmp.sock never blocks it),
    agent.sock, qemu.log (the command QEMU was started with, then its own lines, each stamped),
    serial.log, state.json, the provisioning CD-ROM and the EFI variables. `diskferry logs vm
    NAME` shows the last lines of qemu.log. Unix socket paths hold at most 107 bytes: a VM whose
    paths would be longer is refused with a message saying so.

    Images attach read-only, as Deckhouse attaches them: an ISO as a CD-ROM, any other image as
    a read-only disk; one kept in the image store is opened in place, a slice of its layer's
    blob, nothing copied. The provisioning CD-ROM is made with xorrisofs (Debian's xorriso) in
    the VM's folder: a NoCloud cidata seed (user-data, and meta-data with the VM's uid and
    name), or the Secret's answer files; a missing Secret keeps the VM Pending, its condition
    ProvisioningReady False. The Main network is QEMU's user-mode network: the guest reaches the
    host's loopback services at 10.0.2.2, as a Pod reaches the cluster's. QEMU runs in a cgroup
    of its own, diskferry/NAMESPACE.NAME, weighted at cores times the core fraction of a plain
    process (v2 cpu.weight, v1 cpu.shares), as a Pod's CPU request is; a host without a cgroup
    CPU controller gets a Warning saying the fraction has no effect. Where this host's KVM does
    not run the firmware, the VM is emulated (TCG) and a Warning says so. Stopping presses the
    guest's ACPI power button and waits terminationGracePeriodSeconds for it to power off
    (reason GuestPoweredOff), then ends QEMU (GracePeriodOver). The guest agent is asked every
    10 s while it answers.

    QEMU runs in a session of its own, as workers do: a daemon stopped or killed leaves its VMs
    running, and the next one takes them over by pid and start time. AlwaysOn starts the VM again
    whenever it ends, a guest power-off included; AlwaysOnUnlessStoppedManually does so unless it
    was stopped by hand: the guest powered itself off (the Ready condition's reason is then
    GuestShutdown), or the policy was AlwaysOff since. Deleting the VM stops it as AlwaysOff does,
    then removes its directory. A VM with spec.qmpSocket is only watched: its phase, its disks'
    targets (found by the files its block nodes open) and its CBT state; diskferry never starts,
    stops or deletes that QEMU.

    Changed-block tracking is on for a VM that the DataMoverConfig's
    changedBlockTrackingLabelSelectors select (by its labels, or its namespace's), or that
    carries the label diskferry.io/changed-block-tracking: "true". Each VirtualDisk then gets its
    CBT overlay (`diskferry cbt enable`'s DISK.cbt.qcow2, with persistent dirty bitmaps) and QEMU
    opens the overlay instead of the raw file. A disk is moved only while no QEMU has it open: a
    stopped VM's at once, a running one's at its next start, PendingRestart until then. CBT no
    longer wanted removes the overlays at the same moments, so no write ever bypasses a bitmap. A
    running VM with CBT is backed up live with `diskferry backup --qmp STATUS.QMPSOCKET --disk
    NAME=DISK.cbt.qcow2`; status.blockDevices[].target names each disk's QEMU node, for QMP block
    commands and `human-monitor-command` `qemu-io -d TARGET "write ..."`.
    """

    CONDITIONS = {
        READY: "True while the VM's QEMU runs (Running, Pause); False in every other phase "
        "(Pending, Starting, Stopping, Stopped, Degraded, Terminating), the reason saying why "
        "(what a Pending VM waits for, QemuLaunched, Stopped, GuestShutdown, QemuFailed...).",
        CLASS_READY: "True once the VirtualMachineClass spec.virtualMachineClassName names "
        "exists; False (NotFound) while it does not, the VM Pending.",
        SIZING: "False (SizingPolicyNotMatched) while the VM's cores, memory or core fraction "
        "fall outside its class's sizing policies, the VM Pending; removed once a start is "
        "held for another cause.",
        PROVISIONING_READY: "True once the Secret spec.provisioning names holds what the "
        "first boot needs; False (ProvisioningNotReady) while the VM waits for it. Unset "
        "without provisioning.",
        NETWORK_READY: "False (NetworkNotSupported) while the VM asks for a network other "
        "than Main, which this host has not; unset when it asks for Main only.",
        AGENT_READY: "True while the guest agent answers; False (AgentNotReady) while it does "
        "not. Unset while the VM does not run or has no agent channel.",
        AWAITING_RESTART: "True (ChangesPendingRestart) while changes of the spec wait for "
        "the VM's next start (status.restartAwaitingChanges lists them); removed once none "
        "wait.",
        MIGRATABLE: "False (NoOtherNode) while the VM runs: this host is the one node, there "
        "is nowhere to migrate it to.",
        **RECONCILED_CONDITION,
    }

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualMachine"] = "VirtualMachine"
    spec: VirtualMachineSpec
    status: VirtualMachineStatus = Field(default_factory=VirtualMachineStatus)


def _condition(kind: str) -> str:
    return f".status.conditions[?(@.type=='{kind}')].status"


VIRTUAL_MACHINES = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachine",
    plural="virtualmachines",
    model=VirtualMachine,
    short_names=("vm",),
    categories=("all", "diskferry"),
    columns=(
        Column("Phase", ".status.phase"),
        Column("Uptime", ".status.stats.lastStartTime", "date"),
        Column("Cores", ".status.resources.cpu.cores", priority=1),
        Column("CoreFraction", ".status.resources.cpu.coreFraction", priority=1),
        Column("Memory", ".status.resources.memory.size", priority=1),
        Column("Need restart", _condition(AWAITING_RESTART), priority=1),
        Column("Agent", _condition(AGENT_READY), priority=1),
        Column("Migratable", _condition(MIGRATABLE), priority=1),
        Column("Node", ".status.nodeName"),
        Column("IPAddress", ".status.ipAddress"),
        Column("CBT", ".status.changedBlockTracking.state"),
        Column("RunPolicy", ".spec.runPolicy", priority=1),
        Column("QMP", ".status.qmpSocket", priority=1),
        AGE,
    ),
)
