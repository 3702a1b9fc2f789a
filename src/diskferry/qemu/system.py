"""The `qemu-system-x86_64` command line of a VM: its disks, firmware, NICs, monitors, agent.

Each disk is one `-blockdev` whose node name is also the id of its device (`scsi-hd`,
`scsi-cd`, `ide-hd`, `ide-cd`), so QMP block commands and `human-monitor-command` `qemu-io -d
TARGET` both reach it by that one name. A raw volume opens as `raw`; a CBT overlay opens as
`qcow2` and brings its raw data file and its persistent dirty bitmaps with it. A disk may be a
slice of a file (an image's disk inside its layer in the image store); a read-only qcow2 opens
with no backing file, whatever its header names. The disks sit on virtio-scsi, or for a guest
without virtio drivers on SATA (AHCI) or the PC's IDE, each with its boot index; UEFI VMs boot
OVMF from flash (with Secure Boot on a q35 machine with SMM); NICs join QEMU's user-mode
network, with no boot ROM (a VM boots from its disks). `-no-shutdown` keeps QEMU up when the
guest powers off, so a monitor can tell a guest shutdown from a crash.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from diskferry.qemu.qmp import Qmp, QmpError

QEMU_SYSTEM = "qemu-system-x86_64"
KVM_DEVICE = "/dev/kvm"
AGENT_CHANNEL = "org.qemu.guest_agent.0"
HOST_CPU = "host"
HYPERV = ("hv_relaxed", "hv_vapic", "hv_spinlocks=0x1fff", "hv_time")
"""The Hyper-V enlightenments a Windows guest runs better with, as KubeVirt's Windows presets."""
_PROBE_SECONDS = 30
_FIRMWARE_PROBE_SECONDS = 3.0
_PROBE_QMP = b'{"execute": "qmp_capabilities"}\n{"execute": "quit"}\n'


@dataclass(frozen=True)
class VmDisk:
    """One disk: its node name (and device id), the file QEMU opens and how; `within`, the
    offset and length of the disk in that file when it is only a part of it; a CD-ROM or not;
    its place in the boot order (None: not booted from)."""

    target: str
    path: str
    format: str = "raw"
    read_only: bool = False
    within: tuple[int, int] | None = None
    cdrom: bool = False
    boot_index: int | None = None


class DiskBus(StrEnum):
    """Where the disks sit: virtio-scsi (paravirtualized), SATA (AHCI) or the PC's IDE."""

    VIRTIO = "virtio"
    SATA = "sata"
    IDE = "ide"


@dataclass(frozen=True)
class Firmware:
    """UEFI firmware: OVMF's code, the VM's own variables file, Secure Boot or not."""

    code: Path
    variables: Path
    secure: bool = False


@dataclass(frozen=True)
class VmConfig:
    """What a VM's QEMU is started with: `cpu` is `-cpu`'s value (the host's CPU under KVM and
    QEMU's default under TCG when None), `sockets` lays the cores out (cores per socket rounded
    up, so that sockets times cores per socket may exceed `cores`), `nics` are the MAC addresses
    of its network interfaces, `hyperv` adds Windows' Hyper-V enlightenments (under KVM)."""

    name: str
    cores: int
    memory_bytes: int
    disks: list[VmDisk]
    monitors: list[Path]
    serial_log: Path
    agent_socket: Path | None = None
    kvm: bool = field(default_factory=lambda: kvm_usable())
    cpu: str | None = None
    sockets: int = 1
    bus: DiskBus = DiskBus.VIRTIO
    firmware: Firmware | None = None
    nics: list[str] = field(default_factory=list)
    hyperv: bool = False

    @property
    def firmware_secure(self) -> bool:
        """Whether the VM boots UEFI with Secure Boot (on a q35 machine with SMM)."""
        return self.firmware is not None and self.firmware.secure


@functools.cache
def kvm_usable() -> bool:
    """Whether a VM starts under KVM here: /dev/kvm opens for reading and writing, and a paused
    QEMU with KVM comes up and quits (on some hosts KVM refuses the vCPU's MSRs and QEMU
    aborts as it starts)."""
    try:
        fd = os.open(KVM_DEVICE, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    os.close(fd)
    return _starts("pc")


@functools.cache
def kvm_smm_usable() -> bool:
    """Whether a q35 machine with System Management Mode, which Secure Boot needs, starts under
    KVM here (a nested KVM may not have SMM)."""
    return kvm_usable() and _starts("q35,smm=on")


@functools.cache
def kvm_firmware_usable(code: Path, template: Path) -> bool:
    """Whether UEFI firmware (`code`, its variables copied from `template`) runs under KVM here:
    some nested KVMs stop it with an internal error within its first seconds."""
    if not kvm_usable():
        return False
    with tempfile.TemporaryDirectory(prefix="dfefi") as folder:
        variables, monitor = Path(folder) / "vars.fd", Path(folder) / "qmp.sock"
        shutil.copyfile(template, variables)
        argv = [QEMU_SYSTEM, "-machine", "pc", "-accel", "kvm", "-cpu", HOST_CPU, "-m", "128M"]
        argv += ["-nodefaults", "-display", "none", "-qmp", f"unix:{monitor},server=on,wait=off"]
        argv += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={code}"]
        argv += ["-drive", f"if=pflash,format=raw,unit=1,file={variables}"]
        qemu = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            return _keeps_running(qemu, monitor)
        finally:
            qemu.kill()
            qemu.wait()


def _keeps_running(qemu: subprocess.Popen[bytes], monitor: Path) -> bool:
    """Whether `qemu` runs, and not into an internal error, for _FIRMWARE_PROBE_SECONDS."""
    deadline = time.monotonic() + _FIRMWARE_PROBE_SECONDS
    while not monitor.exists():
        if qemu.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    try:
        with Qmp(str(monitor), timeout=_PROBE_SECONDS) as qmp:
            while time.monotonic() < deadline:
                if qmp.command("query-status")["status"] == "internal-error":
                    return False
                time.sleep(0.2)
    except QmpError:
        return False
    return qemu.poll() is None


@functools.cache
def kvm_hyperv_usable() -> bool:
    """Whether a VM with Hyper-V's enlightenments starts under KVM here (a nested KVM may refuse
    their MSRs)."""
    return kvm_usable() and _starts("pc", ",".join([HOST_CPU, *HYPERV]))


def _starts(machine: str, cpu: str = HOST_CPU) -> bool:
    """Whether a paused QEMU of `machine` with `cpu` under KVM comes up and quits."""
    probe = [QEMU_SYSTEM, "-machine", machine, "-accel", "kvm", "-cpu", cpu, "-S", "-nodefaults"]
    probe += ["-display", "none"]
    try:
        done = subprocess.run(
            [*probe, "-qmp", "stdio"],
            input=_PROBE_QMP,
            capture_output=True,
            timeout=_PROBE_SECONDS,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _blockdev(disk: VmDisk) -> str:
    file: dict[str, Any] = {"driver": "file", "filename": disk.path, "read-only": disk.read_only}
    if disk.within is not None:
        offset, size = disk.within
        file = {"driver": "raw", "offset": offset, "size": size, "read-only": True, "file": file}
    node: dict[str, Any] = {
        "driver": disk.format,
        "node-name": disk.target,
        "read-only": disk.read_only,
        "file": file,
    }
    if disk.format == "qcow2" and disk.read_only:
        node["backing"] = None
    return json.dumps(node, separators=(",", ":"))


def _bus_devices(config: VmConfig) -> list[str]:
    """The disk controller and each disk's device on it, with its boot index."""
    argv: list[str] = []
    if not config.disks:
        return argv
    if config.bus is DiskBus.VIRTIO:
        argv += ["-device", "virtio-scsi-pci,id=scsi0"]
    elif config.bus is DiskBus.SATA and not config.firmware_secure:
        argv += ["-device", "ahci,id=sata0"]
    for i, disk in enumerate(config.disks):
        argv += ["-blockdev", _blockdev(disk)]
        if config.bus is DiskBus.VIRTIO:
            device = "scsi-cd" if disk.cdrom else "scsi-hd"
            where = "bus=scsi0.0"
        else:
            device = "ide-cd" if disk.cdrom else "ide-hd"
            if config.bus is DiskBus.IDE:
                where = f"bus=ide.{i // 2},unit={i % 2}"
            else:  # q35's own AHCI controller has its ports as ide.N
                where = f"bus={'ide' if config.firmware_secure else 'sata0'}.{i}"
        boot = f",bootindex={disk.boot_index}" if disk.boot_index is not None else ""
        argv += ["-device", f"{device},{where},drive={disk.target},id={disk.target}{boot}"]
    return argv


def _firmware(config: VmConfig) -> list[str]:
    """OVMF's code (read-only) and the VM's own copy of its variables, as flash."""
    firmware = config.firmware
    if firmware is None:
        return []
    argv = ["-global", "driver=cfi.pflash01,property=secure,value=on"] if firmware.secure else []
    argv += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={firmware.code}"]
    argv += ["-drive", f"if=pflash,format=raw,unit=1,file={firmware.variables}"]
    return argv


def _nics(config: VmConfig) -> list[str]:
    """Each NIC on QEMU's user-mode network (NAT to the host's), with no boot ROM."""
    argv: list[str] = []
    model = "virtio-net-pci" if config.bus is DiskBus.VIRTIO else "e1000"
    for i, mac in enumerate(config.nics):
        argv += ["-netdev", f"user,id=net{i}"]
        argv += ["-device", f"{model},netdev=net{i},mac={mac},id=nic{i},romfile="]
    return argv


def command(config: VmConfig) -> list[str]:
    """The argv that runs `config`'s VM: no display, no default devices."""
    cpu = config.cpu or (HOST_CPU if config.kvm else None)
    if cpu is not None and config.hyperv and config.kvm:
        cpu = ",".join([cpu, *HYPERV])
    per_socket = -(-config.cores // config.sockets)
    smp = f"{config.cores},sockets={config.sockets},cores={per_socket},threads=1"
    machine = "q35,smm=on" if config.firmware_secure else "pc"
    argv = [
        QEMU_SYSTEM,
        "-name", f"guest={config.name}",
        "-machine", machine, "-accel", "kvm" if config.kvm else "tcg",
        *(["-cpu", cpu] if cpu else []),
        "-smp", f"{smp},maxcpus={config.sockets * per_socket}",
        "-m", f"{max(config.memory_bytes >> 20, 16)}M",
        "-nodefaults", "-nographic", "-no-shutdown", "-msg", "timestamp=on",
        "-serial", f"file:{config.serial_log}",
        *_firmware(config),
    ]  # fmt: skip
    for i, monitor in enumerate(config.monitors):
        argv += ["-chardev", f"socket,id=mon{i},path={monitor},server=on,wait=off"]
        argv += ["-mon", f"chardev=mon{i},mode=control"]
    if config.agent_socket is not None:
        argv += ["-chardev", f"socket,id=agent,path={config.agent_socket},server=on,wait=off"]
        argv += ["-device", "virtio-serial-pci,id=serial0"]
        argv += ["-device", f"virtserialport,chardev=agent,name={AGENT_CHANNEL}"]
    return [*argv, *_bus_devices(config), *_nics(config)]
