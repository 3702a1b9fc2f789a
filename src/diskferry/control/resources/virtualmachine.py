"""VirtualMachine: Deckhouse's shape (block devices, run policy, CPU, memory) run by diskferry.

A VM needs only `spec.blockDeviceRefs` and `spec.runPolicy`. VirtualDisks attach as
writable SCSI disks; VirtualImages and ClusterVirtualImages read-only, as Deckhouse attaches
them: a CD-ROM for an ISO, else a disk (one kept in the image store is opened in place there).
`spec.enableGuestAgent` adds a guest-agent channel; `spec.qmpSocket` names the QMP socket
of a QEMU that something else runs (in DATA_DIR/vm-sockets), which diskferry then only
watches. Besides Deckhouse's phases, the status has KubeVirt's `changedBlockTracking.state`,
and, while the VM runs, `qmpSocket` and each disk's QEMU `target` in `blockDevices`: shown
to users, never read back by the daemon.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from diskferry.control.kinds import AGE, Column, KindInfo
from diskferry.control.model import API_VERSION, GROUP, VERSION, ApiModel, Resource, Status
from diskferry.control.quantity import parse_quantity
from diskferry.control.resources.common import ApiVersion, Quantity

CBT_LABEL = "diskferry.io/changed-block-tracking"
"""A VM labelled with this key and "true" gets CBT whatever the DataMoverConfig selects."""


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
    """One disk or image the VM attaches, in the order given."""

    kind: BlockDeviceKind
    name: str = Field(min_length=1)

    @property
    def read_only(self) -> bool:
        """Whether it attaches read-only (an image: a CD-ROM for an ISO, else a disk)."""
        return self.kind is not BlockDeviceKind.VIRTUAL_DISK


class CpuSpec(ApiModel):
    """The VM's virtual CPUs."""

    cores: int = Field(default=1, ge=1, le=256)


class MemorySpec(ApiModel):
    """The VM's memory."""

    size: Quantity = "256Mi"

    @property
    def size_bytes(self) -> int:
        """The memory in bytes."""
        return parse_quantity(self.size)


class VirtualMachineSpec(ApiModel):
    """The VM wanted."""

    run_policy: RunPolicy = Field(alias="runPolicy")
    block_device_refs: list[BlockDeviceSpecRef] = Field(alias="blockDeviceRefs")
    cpu: CpuSpec = Field(default_factory=CpuSpec)
    memory: MemorySpec = Field(default_factory=MemorySpec)
    enable_guest_agent: bool = Field(default=False, alias="enableGuestAgent")
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


class MachinePhase(StrEnum):
    """Where a VM is in its life, as Deckhouse names it."""

    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    PAUSE = "Pause"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    DEGRADED = "Degraded"
    TERMINATING = "Terminating"


class CbtState(StrEnum):
    """KubeVirt's changed-block-tracking states."""

    DISABLED = "Disabled"
    PENDING_RESTART = "PendingRestart"
    INITIALIZING = "Initializing"
    ENABLED = "Enabled"


class ChangedBlockTrackingStatus(ApiModel):
    """Whether the VM's disks are tracked."""

    state: CbtState = CbtState.DISABLED


class BlockDeviceStatus(ApiModel):
    """An attached disk: what it is and its node name and device id in QEMU."""

    kind: BlockDeviceKind
    name: str
    target: str
    read_only: bool = Field(alias="readOnly")


class VirtualMachineStatus(Status):
    """What was observed of the VM."""

    phase: MachinePhase | None = None
    qmp_socket: str | None = Field(default=None, alias="qmpSocket")
    guest_agent_socket: str | None = Field(default=None, alias="guestAgentSocket")
    block_devices: list[BlockDeviceStatus] | None = Field(default=None, alias="blockDevices")
    changed_block_tracking: ChangedBlockTrackingStatus | None = Field(
        default=None, alias="changedBlockTracking"
    )


class VirtualMachine(Resource):
    """A virtual machine on VirtualDisks and images, run as a QEMU process."""

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualMachine"] = "VirtualMachine"
    spec: VirtualMachineSpec
    status: VirtualMachineStatus = Field(default_factory=VirtualMachineStatus)


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
        Column("Cores", ".spec.cpu.cores", "integer"),
        Column("Memory", ".spec.memory.size"),
        Column("CBT", ".status.changedBlockTracking.state"),
        Column("RunPolicy", ".spec.runPolicy", priority=1),
        Column("QMP", ".status.qmpSocket", priority=1),
        AGE,
    ),
)
