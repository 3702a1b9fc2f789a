"""Fixtures for the QEMU tests: small sparse raw volumes, CBT, and a storage daemon as a VM."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from qemu_helpers import MiB, Vm

from diskferry.qemu import cbt
from diskferry.qemu.storage_daemon import DaemonDisk, StorageDaemon


@pytest.fixture
def volume(tmp_path: Path) -> str:
    """A sparse 32 MiB raw volume."""
    path = tmp_path / "disk.raw"
    with open(path, "wb") as f:
        f.truncate(32 * MiB)
    return str(path)


@pytest.fixture
def cbt_volume(volume: str) -> cbt.CbtDisk:
    """A volume with CBT enabled."""
    return cbt.enable(volume)


@pytest.fixture
def vm(cbt_volume: cbt.CbtDisk) -> Iterator[Vm]:
    """qemu-storage-daemon with the CBT overlay open, as a VM's QEMU would have it."""
    assert cbt_volume.overlay is not None
    daemon = StorageDaemon([DaemonDisk("vmdisk", cbt_volume.overlay)]).start()
    assert daemon.qmp is not None
    daemon.qmp.command(
        "block-export-add", type="nbd", id="vm", node_name="vmdisk", name="vm", writable=True
    )
    daemon.release_monitor()
    yield Vm(daemon, f"nbd+unix:///vm?socket={daemon.nbd_socket}", cbt_volume)
    daemon.stop()
    assert daemon.pid_file.read_text() == ""
