"""The `qemu-system-x86_64` command line of a VM: its disks on virtio-scsi, its monitors, its agent.

Each disk is one `-blockdev` whose node name is also the id of its `scsi-hd` (or `scsi-cd`)
device, so QMP block commands and `human-monitor-command` `qemu-io -d TARGET` both reach it by
that one name. A raw volume opens as `raw`; a CBT overlay opens as `qcow2` and brings its raw
data file and its persistent dirty bitmaps with it. A disk may be a slice of a file (an image's
disk inside its layer in the image store); a read-only qcow2 opens with no backing file,
whatever its header names. `-no-shutdown` keeps
QEMU up when the guest powers off, so a monitor can tell a guest shutdown from a crash.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

QEMU_SYSTEM = "qemu-system-x86_64"
KVM_DEVICE = "/dev/kvm"
AGENT_CHANNEL = "org.qemu.guest_agent.0"
KVM_ACCEL = ["-accel", "kvm", "-cpu", "host"]
HOST_CPU = "host"
_PROBE_SECONDS = 30
_PROBE_QMP = b'{"execute": "qmp_capabilities"}\n{"execute": "quit"}\n'


@dataclass(frozen=True)
class VmDisk:
    """One disk: its node name (and device id), the file QEMU opens and how; `within`, the
    offset and length of the disk in that file when it is only a part of it; a CD-ROM or not."""

    target: str
    path: str
    format: str = "raw"
    read_only: bool = False
    within: tuple[int, int] | None = None
    cdrom: bool = False


@dataclass(frozen=True)
class VmConfig:
    """What a VM's QEMU is started with: `cpu` is `-cpu`'s value (the host's CPU under KVM and
    QEMU's default under TCG when None), `sockets` lays the cores out (cores per socket rounded
    up, so that sockets times cores per socket may exceed `cores`)."""

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
    probe = [QEMU_SYSTEM, "-machine", "pc", *KVM_ACCEL, "-S", "-nodefaults", "-display", "none"]
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


def command(config: VmConfig) -> list[str]:
    """The argv that runs `config`'s VM: no display, no default devices."""
    cpu = config.cpu or (HOST_CPU if config.kvm else None)
    per_socket = -(-config.cores // config.sockets)
    smp = f"{config.cores},sockets={config.sockets},cores={per_socket},threads=1"
    argv = [
        QEMU_SYSTEM,
        "-name", f"guest={config.name}",
        "-machine", "pc", "-accel", "kvm" if config.kvm else "tcg",
        *(["-cpu", cpu] if cpu else []),
        "-smp", f"{smp},maxcpus={config.sockets * per_socket}",
        "-m", f"{max(config.memory_bytes >> 20, 16)}M",
        "-nodefaults", "-nographic", "-no-shutdown", "-msg", "timestamp=on",
        "-serial", f"file:{config.serial_log}",
    ]  # fmt: skip
    for i, monitor in enumerate(config.monitors):
        argv += ["-chardev", f"socket,id=mon{i},path={monitor},server=on,wait=off"]
        argv += ["-mon", f"chardev=mon{i},mode=control"]
    if config.agent_socket is not None:
        argv += ["-chardev", f"socket,id=agent,path={config.agent_socket},server=on,wait=off"]
        argv += ["-device", "virtio-serial-pci,id=serial0"]
        argv += ["-device", f"virtserialport,chardev=agent,name={AGENT_CHANNEL}"]
    if config.disks:
        argv += ["-device", "virtio-scsi-pci,id=scsi0"]
    for disk in config.disks:
        device = "scsi-cd" if disk.cdrom else "scsi-hd"
        argv += ["-blockdev", _blockdev(disk)]
        argv += ["-device", f"{device},bus=scsi0.0,drive={disk.target},id={disk.target}"]
    return argv
