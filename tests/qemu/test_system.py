"""The qemu-system-x86_64 command line: a real QEMU under TCG and under KVM, its disks reachable
by their targets, a CBT overlay opened with its bitmaps."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from qemu_helpers import MiB

from diskferry.qemu import cbt, system
from diskferry.qemu.bitmaps import BASE
from diskferry.qemu.qmp import Qmp
from diskferry.qemu.system import VmConfig, VmDisk, command, kvm_usable


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory short enough for Unix sockets."""
    with tempfile.TemporaryDirectory(prefix="dfq", dir="/tmp") as path:
        yield Path(path)


def run(config: VmConfig) -> subprocess.Popen[bytes]:
    """Start QEMU on `config` and wait until its first monitor exists."""
    qemu = subprocess.Popen(command(config), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(600):
        if config.monitors[0].exists() or qemu.poll() is not None:
            break
        time.sleep(0.05)
    assert qemu.poll() is None, qemu.stderr.read() if qemu.stderr else ""
    return qemu


def config_of(directory: Path, disks: list[VmDisk], kvm: bool) -> VmConfig:
    """A small VM in `directory`."""
    return VmConfig(
        name="t",
        cores=1,
        memory_bytes=64 * MiB,
        disks=disks,
        monitors=[directory / "a.sock", directory / "b.sock"],
        serial_log=directory / "serial.log",
        kvm=kvm,
    )


def test_kvm_is_found_unusable_exactly_when_a_vm_under_it_does_not_start(short_dir: Path) -> None:
    qemu = subprocess.Popen(
        command(config_of(short_dir, [], True)),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        qemu.wait(10)
    except subprocess.TimeoutExpired:
        assert kvm_usable(), "a VM runs under KVM, yet KVM was found unusable"
    else:
        assert not kvm_usable(), f"KVM was found usable, yet QEMU ended with {qemu.returncode}"
    finally:
        qemu.kill()
        qemu.wait()


@pytest.mark.parametrize("kvm", [False, True], ids=["tcg", "kvm-where-usable"])
def test_both_monitors_answer_under_the_accelerator_asked(short_dir: Path, kvm: bool) -> None:
    kvm = kvm and kvm_usable()  # where KVM is unusable the test above checks it is found so
    qemu = run(config_of(short_dir, [], kvm))
    try:
        for monitor in (short_dir / "a.sock", short_dir / "b.sock"):
            with Qmp(str(monitor)) as qmp:
                assert qmp.command("query-kvm")["enabled"] is kvm
                assert qmp.command("query-status")["status"] == "running"
    finally:
        qemu.kill()
        qemu.wait()


def test_a_disk_and_a_cdrom_by_their_targets(short_dir: Path) -> None:
    """The writable disk takes `qemu-io -d TARGET` writes; the read-only one refuses them."""
    disk, iso = short_dir / "d.raw", short_dir / "c.iso"
    for path in (disk, iso):
        with path.open("wb") as f:
            f.truncate(4 * MiB)
    disks = [VmDisk("vd-d", str(disk)), VmDisk("vi-c", str(iso), read_only=True, cdrom=True)]
    qemu = run(config_of(short_dir, disks, kvm_usable()))
    try:
        with Qmp(str(short_dir / "b.sock")) as qmp:
            hmp = "human-monitor-command"
            assert qmp.command(hmp, command_line='qemu-io -d vd-d "write -P 0x7 0 4k"') == ""
            refused = qmp.command(hmp, command_line='qemu-io -d vi-c "write -P 0x7 0 4k"')
            assert "read-only" in refused
            nodes = {n["node-name"]: n for n in qmp.command("query-named-block-nodes", flat=True)}
            removable = {b["qdev"]: b["removable"] for b in qmp.command("query-block")}
        assert nodes["vi-c"]["ro"] is True and nodes["vd-d"]["ro"] is False
        assert removable == {"vd-d": False, "vi-c": True}
    finally:
        qemu.kill()
        qemu.wait()
    assert disk.read_bytes()[:4096] == b"\x07" * 4096
    assert iso.read_bytes()[:4096] == bytes(4096)


def test_a_cbt_overlay_opens_with_its_raw_data_file_and_bitmap(short_dir: Path) -> None:
    disk = short_dir / "d.raw"
    with disk.open("wb") as f:
        f.truncate(4 * MiB)
    overlay = cbt.enable(str(disk)).overlay
    assert overlay
    qemu = run(config_of(short_dir, [VmDisk("vd-d", overlay, "qcow2")], kvm_usable()))
    try:
        with Qmp(str(short_dir / "a.sock")) as qmp:
            qmp.command("human-monitor-command", command_line='qemu-io -d vd-d "write 1M 64k"')
            node = next(
                n
                for n in qmp.command("query-named-block-nodes", flat=True)
                if n["node-name"] == "vd-d"
            )
            qmp.command("quit")
        qemu.wait(10)
    finally:
        qemu.kill()
        qemu.wait()
    assert node["drv"] == "qcow2"
    assert [b["count"] for b in node["dirty-bitmaps"] if b["name"] == BASE] == [65536]
    assert [c.name for c in cbt.status(str(disk)).checkpoints] == [BASE]  # stored on quit


@pytest.mark.parametrize(("exit_code", "usable"), [(0, True), (134, False)])
def test_kvm_counts_as_usable_only_when_a_host_cpu_starts_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int, usable: bool
) -> None:
    """A /dev/kvm that opens is not enough: on some nested hosts QEMU aborts setting up a
    `-cpu host` vCPU (an MSR refused), and then a VM must run under TCG."""
    qemu = tmp_path / "qemu"
    qemu.write_text(f"#!/bin/sh\ncat >/dev/null\nexit {exit_code}\n")
    qemu.chmod(0o755)
    monkeypatch.setattr(system, "KVM_DEVICE", "/dev/null")
    monkeypatch.setattr(system, "QEMU_SYSTEM", str(qemu))
    system.kvm_usable.cache_clear()
    try:
        assert kvm_usable() is usable
    finally:
        system.kvm_usable.cache_clear()


OVMF = Path("/usr/share/OVMF")


def device(qmp: Qmp, target: str, prop: str) -> object:
    """A property of the device whose id is `target`."""
    return qmp.command("qom-get", path=f"/machine/peripheral/{target}", property=prop)


@pytest.mark.parametrize(
    ("bus", "disk_type", "nic_type"),
    [
        (system.DiskBus.VIRTIO, "scsi-hd", "virtio-net-pci"),
        (system.DiskBus.SATA, "ide-hd", "e1000"),
        (system.DiskBus.IDE, "ide-hd", "e1000"),
    ],
)
def test_disks_on_their_bus_in_boot_order_and_a_nic(
    short_dir: Path, bus: system.DiskBus, disk_type: str, nic_type: str
) -> None:
    disks = []
    for name, boot in (("one", 2), ("two", 1)):
        path = short_dir / f"{name}.raw"
        path.write_bytes(bytes(MiB))
        disks.append(VmDisk(name, str(path), boot_index=boot))
    iso = short_dir / "seed.iso"
    iso.write_bytes(bytes(MiB))
    disks.append(VmDisk("seed", str(iso), read_only=True, cdrom=True))
    base = config_of(short_dir, disks, kvm_usable())
    config = dataclasses.replace(base, bus=bus, nics=["02:00:00:00:00:01"])
    qemu = run(config)
    try:
        with Qmp(str(short_dir / "a.sock")) as qmp:
            assert device(qmp, "one", "type") == disk_type
            assert device(qmp, "seed", "type") == disk_type.replace("hd", "cd")
            assert [device(qmp, d, "bootindex") for d in ("one", "two")] == [2, 1]
            assert device(qmp, "nic0", "type") == nic_type
            assert device(qmp, "nic0", "mac") == "02:00:00:00:00:01"
    finally:
        qemu.kill()
        qemu.wait()


@pytest.mark.parametrize("secure", [False, True])
def test_uefi_boots_ovmf_from_flash_with_the_vms_own_variables(
    short_dir: Path, secure: bool
) -> None:
    code = OVMF / ("OVMF_CODE_4M.secboot.fd" if secure else "OVMF_CODE_4M.fd")
    variables = short_dir / "efivars.fd"
    variables.write_bytes(
        (OVMF / ("OVMF_VARS_4M.ms.fd" if secure else "OVMF_VARS_4M.fd")).read_bytes()
    )
    usable = system.kvm_firmware_usable(code, OVMF / "OVMF_VARS_4M.fd")
    kvm = usable and (not secure or system.kvm_smm_usable())
    base = config_of(short_dir, [], kvm)
    config = dataclasses.replace(base, firmware=system.Firmware(code, variables, secure))
    qemu = run(config)
    try:
        with Qmp(str(short_dir / "a.sock")) as qmp:
            assert qmp.command("query-status")["status"] == "running"
            machine = qmp.command("qom-get", path="/machine", property="type")
            assert machine.startswith("pc-q35" if secure else "pc-i440fx")
            if secure:
                assert qmp.command("qom-get", path="/machine", property="smm") == "on"
        opened = {
            os.readlink(f"/proc/{qemu.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{qemu.pid}/fd")
        }
        assert {str(code), str(variables)} <= opened
    finally:
        qemu.kill()
        qemu.wait()


def test_a_windows_guest_gets_hyper_v_enlightenments_under_kvm(short_dir: Path) -> None:
    argv = command(dataclasses.replace(config_of(short_dir, [], True), hyperv=True))
    assert argv[argv.index("-cpu") + 1] == "host,hv_relaxed,hv_vapic,hv_spinlocks=0x1fff,hv_time"
    tcg = command(dataclasses.replace(config_of(short_dir, [], False), hyperv=True))
    assert "-cpu" not in tcg


def test_uefi_is_found_unusable_under_kvm_exactly_when_it_stops_there(short_dir: Path) -> None:
    """The probe's answer is what a UEFI VM under KVM does here: run on, or stop in an error."""
    if not kvm_usable():
        pytest.skip("no usable KVM here")
    code, template = OVMF / "OVMF_CODE_4M.fd", OVMF / "OVMF_VARS_4M.fd"
    variables = short_dir / "efivars.fd"
    variables.write_bytes(template.read_bytes())
    base = config_of(short_dir, [], True)
    qemu = run(dataclasses.replace(base, firmware=system.Firmware(code, variables)))
    try:
        with Qmp(str(short_dir / "a.sock")) as qmp:
            seen = set()
            for _ in range(15):
                seen.add(qmp.command("query-status")["status"])
                time.sleep(0.2)
    finally:
        qemu.kill()
        qemu.wait()
    assert system.kvm_firmware_usable(code, template) == ("internal-error" not in seen)
