"""The machines that run VirtualMachines, as reconcilers see them: a VM started from a spec that
names no path of the host but its disks' files, its run state and QEMU's version, its guest
agent's answers, its power button, its end; and the sockets a backup reaches it by. The
embedded host runs a QEMU process per VM and keeps one connection of its own to each; a
cluster runs KubeVirt's VirtualMachineInstances."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from diskferry.base.errors import DiskferryError
from diskferry.control.resources.virtualmachine import Bootloader, VirtualMachine

AGENT_SECONDS = 10.0
"""How often at most a VM's guest agent is asked what it knows."""


class MachineError(DiskferryError):
    """A VM could not be started, reached or stopped."""

    reason = "MachineFailed"


class SocketRefusedError(MachineError):
    """A QMP socket named for a VM that runs elsewhere is not one the host may use."""

    reason = "QmpSocketRefused"


class SeedError(MachineError):
    """A VM's first-boot seed could not be made."""

    reason = "ProvisioningFailed"


@dataclass(frozen=True)
class Sockets:
    """How a VM's QEMU is reached: its QMP socket, and its guest agent's (or None)."""

    qmp: str
    agent: str | None


@dataclass(frozen=True)
class GuestFacts:
    """What a guest agent said: whether it answered, the guest OS (in KubeVirt's names), each
    MAC's first IPv4 address."""

    answered: bool
    os_info: dict[str, str] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RunState:
    """A running VM's state as QEMU tells it (`running`, `paused`, `shutdown`, an error...)
    and QEMU's version."""

    status: str
    version: str


@dataclass(frozen=True)
class Seed:
    """A first-boot CD-ROM: its label and files."""

    label: str
    files: dict[str, bytes]


@dataclass(frozen=True)
class MachineDisk:
    """One disk: its device's name, the file it is (`within`: the offset and length of the disk
    in it, when only a part), how it is opened, its place in the boot order (None: not booted
    from); `tracked` opens a raw file through its changed-block-tracking overlay."""

    target: str
    path: str
    format: str = "raw"
    read_only: bool = False
    within: tuple[int, int] | None = None
    cdrom: bool = False
    boot_index: int | None = None
    tracked: bool = False


@dataclass(frozen=True)
class MachineSpec:
    """What a VM runs with: its cores (laid out in `sockets`) and the share of each it is sure
    to get (percent), memory, CPU model (None: the host's), disks and their bus, firmware, the
    MACs of its NICs on the Main network, Hyper-V's enlightenments for a Windows guest, a guest
    agent channel, a first-boot seed."""

    cores: int
    memory_bytes: int
    disks: list[MachineDisk]
    core_fraction: int = 100
    cpu: str | None = None
    sockets: int = 1
    bus: Literal["virtio", "sata", "ide"] = "virtio"
    bootloader: Bootloader = Bootloader.BIOS
    nics: list[str] = field(default_factory=list)
    hyperv: bool = False
    guest_agent: bool = False
    seed: Seed | None = None


@dataclass(frozen=True)
class Launched:
    """What a start could not give the VM: why its CPU share has no effect (None when it has),
    whether its firmware runs emulated where KVM would run it, whether KVM refused Hyper-V's
    enlightenments it asked for."""

    unweighed: str | None = None
    firmware_emulated: bool = False
    hyperv_refused: bool = False


@dataclass(frozen=True)
class Device:
    """A disk file as a VM that runs elsewhere opened it: its node's name, and whether through
    its changed-block-tracking overlay."""

    target: str
    tracked: bool


@dataclass(frozen=True)
class External:
    """A VM that runs elsewhere: its run state, and the devices of the files it opened."""

    status: str
    devices: dict[str, Device]


class Machines(Protocol):
    """Runs VMs, and tells of them; a VM is named by its namespace and name."""

    def running(self, namespace: str, name: str) -> bool:
        """Whether the VM runs."""

    def since_start(self, namespace: str, name: str) -> float | None:
        """Seconds since the VM was last started, None when it never was."""

    def launch(self, namespace: str, name: str) -> dict[str, Any]:
        """What the VM was last started with (the `launch` of `start`; {} when never)."""

    def start(
        self, namespace: str, name: str, spec: MachineSpec, launch: dict[str, Any]
    ) -> Launched:
        """Start the VM as `spec` says, unless it runs already, keeping `launch` with it;
        MachineError (SeedError) when it cannot be started."""

    def state(self, namespace: str, name: str) -> RunState | None:
        """The running VM's state, None while it cannot tell it (starting, or gone)."""

    def power_down(self, namespace: str, name: str) -> None:
        """Press the VM's ACPI power button, and remember when (MachineError while it cannot
        be pressed yet)."""

    def since_power_down(self, namespace: str, name: str) -> float | None:
        """Seconds since the running VM's power button was pressed, None when it was not."""

    def stop(self, namespace: str, name: str) -> None:
        """End the VM (MachineError when it would not end)."""

    def remove(self, namespace: str, name: str) -> None:
        """Forget a stopped VM: what was kept of it (logs, state, its firmware's variables)."""

    def log_tail(self, namespace: str, name: str, lines: int) -> list[str]:
        """The last lines of the VM's log: how it was started, then what QEMU said."""

    def last_words(self, namespace: str, name: str, lines: int) -> list[str]:
        """The last lines QEMU itself said."""

    def sockets(self, vm: VirtualMachine) -> Sockets:
        """The VM's sockets as the host decided them: its own for a VM it runs, the checked
        `spec.qmpSocket` (and no agent) for one that runs elsewhere (SocketRefusedError when
        the host may not use it); never what the VM's status says."""

    def guest(self, vm: VirtualMachine) -> GuestFacts:
        """What the VM's guest agent says, asked at most every AGENT_SECONDS; not answered
        without an agent channel or an agent behind it."""

    def external(self, vm: VirtualMachine, files: list[str]) -> External:
        """The state of a VM that runs elsewhere (`spec.qmpSocket`), and the devices it opened
        of `files`; MachineError when it cannot be reached."""
