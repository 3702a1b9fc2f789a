"""The qemu-system-x86_64 command line: a real QEMU under TCG and under KVM, its disks reachable
by their targets, a CBT overlay opened with its bitmaps."""

from __future__ import annotations

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
