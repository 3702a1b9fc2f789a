"""A VM's spec as this host's QEMU runs it: its firmware (SeaBIOS, or Debian's OVMF with the
VM's own variables), under KVM where KVM runs that firmware (TCG otherwise), Hyper-V's
enlightenments where KVM takes them, a tracked disk opened through its CBT overlay, and the
VM's sockets and serial log in its folder."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from diskferry.control.host.machines import Launched, MachineDisk, MachineSpec
from diskferry.control.resources.virtualmachine import Bootloader
from diskferry.qemu import cbt
from diskferry.qemu.system import (
    DiskBus,
    Firmware,
    VmConfig,
    VmDisk,
    kvm_firmware_usable,
    kvm_hyperv_usable,
    kvm_smm_usable,
    kvm_usable,
)

OVMF_DIR = Path("/usr/share/OVMF")
OVMF = (OVMF_DIR / "OVMF_CODE_4M.fd", OVMF_DIR / "OVMF_VARS_4M.fd")
OVMF_SECURE = (OVMF_DIR / "OVMF_CODE_4M.secboot.fd", OVMF_DIR / "OVMF_VARS_4M.ms.fd")
"""Debian's OVMF: the code and the variables' template, without and with Secure Boot (its
variables enrol Microsoft's keys, as a Windows guest needs)."""


@dataclass(frozen=True)
class Paths:
    """Where a VM's QEMU keeps what is its own: its monitors (the controller's first), its
    guest agent's socket, its serial log, its first-boot seed."""

    monitors: list[Path]
    agent: Path
    serial_log: Path
    seed: Path


def _ovmf(bootloader: Bootloader) -> tuple[Path, Path]:
    secure = bootloader is Bootloader.EFI_WITH_SECURE_BOOT
    return OVMF_SECURE if secure else OVMF


def kvm_for(bootloader: Bootloader) -> bool:
    """Whether a VM of `bootloader` runs under KVM: KVM must run its firmware (OVMF, with SMM
    for Secure Boot), else it is emulated (TCG)."""
    if bootloader is Bootloader.BIOS:
        return kvm_usable()
    code, template = _ovmf(bootloader)
    secure = bootloader is Bootloader.EFI_WITH_SECURE_BOOT
    return (not secure or kvm_smm_usable()) and kvm_firmware_usable(code, template)


def _disk(disk: MachineDisk) -> VmDisk:
    """The disk as QEMU opens it: a tracked one through its CBT overlay (qcow2)."""
    path, fmt = (cbt.overlay_path(disk.path), "qcow2") if disk.tracked else (disk.path, disk.format)
    return VmDisk(disk.target, path, fmt, disk.read_only, disk.within, disk.cdrom, disk.boot_index)


def qemu_config(
    name: str,
    spec: MachineSpec,
    paths: Paths,
    variables: Callable[[Path, bool], Path],
) -> tuple[VmConfig, Launched]:
    """The QEMU configuration of the VM `name` (MachineError from `variables` when its
    firmware's variables cannot be had: they are the VM's own, copied from OVMF's template
    and secure or not), and what of `spec` this host's KVM cannot give it."""
    disks = [_disk(d) for d in spec.disks]
    if spec.seed is not None:
        disks.append(VmDisk("provisioning", str(paths.seed), read_only=True, cdrom=True))
    firmware = None
    if spec.bootloader is not Bootloader.BIOS:
        code, template = _ovmf(spec.bootloader)
        secure = spec.bootloader is Bootloader.EFI_WITH_SECURE_BOOT
        firmware = Firmware(code, variables(template, secure), secure)
    kvm = kvm_for(spec.bootloader)
    hyperv = spec.hyperv and kvm_hyperv_usable()
    config = VmConfig(
        name=name,
        cores=spec.cores,
        memory_bytes=spec.memory_bytes,
        disks=disks,
        monitors=paths.monitors,
        serial_log=paths.serial_log,
        agent_socket=paths.agent if spec.guest_agent else None,
        cpu=spec.cpu,
        sockets=spec.sockets,
        kvm=kvm,
        bus=DiskBus(spec.bus),
        firmware=firmware,
        nics=spec.nics,
        hyperv=hyperv,
    )
    launched = Launched(
        firmware_emulated=firmware is not None and not kvm and kvm_usable(),
        hyperv_refused=spec.hyperv and kvm and not hyperv,
    )
    return config, launched
