"""StorageDaemon and Qmp against a real qemu-storage-daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from qemu_helpers import bare_daemon, image_bitmaps

from diskferry.qemu import cbt
from diskferry.qemu.hostlock import Busy
from diskferry.qemu.qmp import Qmp, QmpError
from diskferry.qemu.storage_daemon import DaemonDisk, StorageDaemon, StorageDaemonError


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} is still alive"
        time.sleep(0.05)


def test_start_serves_qmp_and_stop_quits_cleanly(cbt_volume: cbt.CbtDisk) -> None:
    assert cbt_volume.overlay is not None
    daemon = StorageDaemon([DaemonDisk("d", cbt_volume.overlay)]).start()
    assert daemon.qmp is not None and daemon.process is not None and daemon.dir is not None
    workdir, process = daemon.dir, daemon.process
    assert daemon.pid_file.read_text().split()[0] == str(process.pid)
    assert os.path.exists(daemon.nbd_socket)
    names = [n["node-name"] for n in daemon.qmp.command("query-named-block-nodes", flat=True)]
    assert "d" in names
    daemon.qmp.command("block-dirty-bitmap-add", node="d", name="kept", persistent=True)
    daemon.stop()
    assert process.returncode == 0
    assert not workdir.exists()
    assert daemon.pid_file.read_text() == ""
    assert image_bitmaps(cbt_volume.overlay)["kept"] == ["auto"]


def test_qmp_errors_carry_the_error_class(cbt_volume: cbt.CbtDisk, tmp_path: Path) -> None:
    assert cbt_volume.overlay is not None
    with StorageDaemon([DaemonDisk("d", cbt_volume.overlay)]) as daemon:
        assert daemon.qmp is not None
        with pytest.raises(QmpError) as caught:
            daemon.qmp.command("block-dirty-bitmap-remove", node="d", name="no-such-bitmap")
        assert caught.value.error_class == "GenericError"
        assert "no-such-bitmap" in (caught.value.desc or "")
        assert caught.value.message.startswith("QEMU refused block-dirty-bitmap-remove")
    with pytest.raises(QmpError) as caught:
        Qmp(str(tmp_path / "nothing.sock"))
    assert caught.value.reason == "QmpConnectFailed"


def test_a_daemon_that_cannot_open_its_disk_says_why(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.qcow2")
    daemon = StorageDaemon([DaemonDisk("d", missing)])
    with pytest.raises(StorageDaemonError, match=r"missing\.qcow2"):
        daemon.start()
    assert daemon.dir is None
    assert daemon.pid_file.read_text() == ""


def test_a_daemon_for_disks_a_live_process_serves_is_refused(cbt_volume: cbt.CbtDisk) -> None:
    assert cbt_volume.overlay is not None
    disks = [DaemonDisk("d", cbt_volume.overlay)]
    with StorageDaemon(disks) as first:
        with pytest.raises(Busy, match="in use by another diskferry process"):
            StorageDaemon(disks).start()
        assert first.process is not None and first.process.poll() is None


def test_a_disk_a_vm_has_open_is_refused_with_advice(cbt_volume: cbt.CbtDisk) -> None:
    assert cbt_volume.overlay is not None
    vm = bare_daemon(cbt_volume.overlay)
    try:
        deadline = time.monotonic() + 20
        while "in-use" not in image_bitmaps(cbt_volume.overlay).get("diskferry-base", []):
            assert time.monotonic() < deadline, "the daemon never opened the overlay"
            time.sleep(0.05)
        with pytest.raises(StorageDaemonError, match="open in another process") as caught:
            StorageDaemon([DaemonDisk("d", cbt_volume.overlay)]).start()
        assert caught.value.reason == "DiskInUse"
    finally:
        vm.terminate()
        vm.wait()


def test_a_leftover_daemon_named_by_the_pid_file_is_ended(cbt_volume: cbt.CbtDisk) -> None:
    assert cbt_volume.overlay is not None
    disks = [DaemonDisk("d", cbt_volume.overlay)]
    leftover = bare_daemon(cbt_volume.overlay)
    try:
        started = Path(f"/proc/{leftover.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        daemon = StorageDaemon(disks)
        daemon.pid_file.write_text(f"{leftover.pid} {started}\n")
        with daemon:
            assert leftover.wait(10) == -signal.SIGKILL
            assert daemon.pid_file.read_text().split()[0] == str(daemon.process.pid)
        assert daemon.pid_file.read_text() == ""
    finally:
        leftover.kill()
        leftover.wait()


def _start_in_a_thread(disks: list[DaemonDisk]) -> StorageDaemon:
    """A daemon started by a thread that has ended by the time this returns."""
    started: list[StorageDaemon] = []
    starter = threading.Thread(target=lambda: started.append(StorageDaemon(disks).start()))
    starter.start()
    starter.join()
    return started[0]


def test_a_daemon_outlives_the_thread_that_started_it(cbt_volume: cbt.CbtDisk) -> None:
    assert cbt_volume.overlay is not None
    daemon = _start_in_a_thread([DaemonDisk("d", cbt_volume.overlay)])
    process = daemon.process
    assert daemon.qmp is not None and process is not None
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(2)
        names = [n["node-name"] for n in daemon.qmp.command("query-named-block-nodes", flat=True)]
        assert "d" in names
    finally:
        daemon.stop()
    assert process.returncode == 0


def test_the_daemon_dies_with_its_parent_and_the_next_removes_its_folder(
    cbt_volume: cbt.CbtDisk,
) -> None:
    assert cbt_volume.overlay is not None
    script = (
        "import sys, threading, time\n"
        "from diskferry.qemu.storage_daemon import DaemonDisk, StorageDaemon\n"
        "started = []\n"
        "disks = [DaemonDisk('d', sys.argv[1])]\n"
        "starter = threading.Thread(target=lambda: started.append(StorageDaemon(disks).start()))\n"
        "starter.start()\n"
        "starter.join()\n"
        "d = started[0]\n"
        "d.qmp.command('block-dirty-bitmap-add', node='d', name='p', persistent=True)\n"
        "print(d.process.pid, d.dir, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, cbt_volume.overlay], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pid, folder = parent.stdout.readline().split()
        daemon_pid = int(pid)
        assert _alive(daemon_pid)
    finally:
        parent.kill()
        parent.wait()
    _wait_gone(daemon_pid)
    assert image_bitmaps(cbt_volume.overlay)["p"] == ["auto"]
    assert os.path.isdir(folder)
    with StorageDaemon([DaemonDisk("d", cbt_volume.overlay)]) as again:
        assert again.qmp is not None
        assert not os.path.exists(folder)  # the killed starter's sockets and log
