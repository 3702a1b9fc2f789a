"""Backup sessions against stopped disks and a running QEMU, with the rules of CBT."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from qemu_helpers import KiB, MiB, Vm, bare_daemon, dirty_runs, image_bitmaps, read, write

from diskferry.disk.file_volume import FileVolume
from diskferry.nbd.volume import NbdVolume
from diskferry.qemu import cbt
from diskferry.qemu.hostlock import Busy
from diskferry.qemu.qmp import Qmp, QmpError
from diskferry.qemu.session import BackupSession, DiskExport, SessionDisk, SessionError

REPO = "repo1"


def _dirty(export: DiskExport) -> list[tuple[int, int]]:
    assert export.meta_context is not None
    return dirty_runs(export.url, export.meta_context)


def _live(vm: Vm, repo: str = REPO) -> BackupSession:
    disk = SessionDisk("vda", vm.disk.volume)
    return BackupSession([disk], repo, qmp_socket=vm.qmp_socket, nbd_socket=vm.nbd_socket)


def _stopped(path: str) -> BackupSession:
    return BackupSession([SessionDisk("vda", path)], REPO)


@contextlib.contextmanager
def _exported(session: BackupSession, since: str | None = None) -> Iterator[DiskExport]:
    """The session's one disk exported: incremental since `since`, or full."""
    with session as opened:
        (export,) = opened.start({"vda": since})
        yield export


def _full(vm: Vm, repo: str = REPO) -> str:
    with _exported(_live(vm, repo=repo)) as export:
        assert (export.mode, export.meta_context) == ("full", None)
        return export.checkpoint


def _repo_bitmaps(vm: Vm) -> dict[str, bool]:
    """The diskferry bitmaps of the VM's disk and whether each is recording."""
    with Qmp(vm.qmp_socket) as qmp:
        nodes = qmp.command("query-named-block-nodes", flat=True)
    node = next(n for n in nodes if n["node-name"] == "vmdisk")
    named = [
        b for b in node["dirty-bitmaps"] if b.get("name", "diskferry-base") != "diskferry-base"
    ]
    return {b["name"]: b["recording"] for b in named}


def _leftovers(vm: Vm) -> list[str]:
    with Qmp(vm.qmp_socket) as qmp:
        found = [e["id"] for e in qmp.command("query-block-exports") if e["id"] != "vm"]
        found += [j["device"] for j in qmp.command("query-block-jobs")]
        for node in qmp.command("query-named-block-nodes", flat=True):
            if node["node-name"].startswith("diskferry-"):
                found.append(node["node-name"])
            names = [b.get("name") for b in node.get("dirty-bitmaps", [])]
            found += [n for n in names if n == "diskferry-merge"]
    files = os.listdir(os.path.dirname(vm.disk.volume))
    return found + [f for f in files if f not in ("disk.raw", "disk.raw.cbt.qcow2")]


def test_stopped_disk_full_then_incremental_of_exactly_the_written_runs(
    cbt_volume: cbt.CbtDisk,
) -> None:
    overlay = cbt_volume.overlay
    assert overlay is not None
    write(overlay, 4 * MiB, 64 * KiB, 0x55)
    with _exported(_stopped(cbt_volume.volume)) as export:
        assert export.mode == "full"
        assert export.size == 32 * MiB
        assert export.checkpoint == f"diskferry-{REPO}-1"
        assert export.url.startswith("nbd+unix:///vda?socket=")
        assert read(export.url, 4 * MiB, 64 * KiB) == b"\x55" * (64 * KiB)
    first = export.checkpoint
    write(overlay, 1 * MiB, 64 * KiB, 0xAA)
    write(overlay, 10 * MiB, 192 * KiB, 0xBB)
    with _exported(_stopped(overlay), since=first) as export:
        assert export.mode == "incremental"
        assert export.granularity == 64 * KiB
        assert _dirty(export) == [(1 * MiB, 64 * KiB), (10 * MiB, 192 * KiB)]
        assert read(export.url, 10 * MiB, 4) == b"\xbb" * 4
    assert sorted(image_bitmaps(overlay)) == ["diskferry-base", f"diskferry-{REPO}-2"]
    assert sorted(os.listdir(os.path.dirname(overlay))) == ["disk.raw", "disk.raw.cbt.qcow2"]


def test_a_running_vm_keeps_writing_while_the_export_shows_the_checkpoint(vm: Vm) -> None:
    write(vm.url, 0, 64 * KiB, 0x11)
    with _exported(_live(vm)) as export:
        first = export.checkpoint
        write(vm.url, 0, 64 * KiB, 0x22)
        write(vm.url, 2 * MiB, 64 * KiB, 0x33)
        assert read(export.url, 0, 64 * KiB) == b"\x11" * (64 * KiB)
        assert read(export.url, 2 * MiB, 4) == b"\0" * 4
        assert read(vm.url, 0, 4) == b"\x22" * 4
    write(vm.url, 5 * MiB, 64 * KiB, 0x44)
    with _exported(_live(vm), since=first) as export:
        write(vm.url, 7 * MiB, 64 * KiB, 0x55)
        assert export.mode == "incremental"
        assert _dirty(export) == [(0, 64 * KiB), (2 * MiB, 64 * KiB), (5 * MiB, 64 * KiB)]
        assert read(export.url, 0, 4) == b"\x22" * 4
        assert read(export.url, 7 * MiB, 4) == b"\0" * 4
        second = export.checkpoint
    assert _leftovers(vm) == []
    assert _repo_bitmaps(vm) == {second: True}
    assert read(vm.url, 7 * MiB, 4) == b"\x55" * 4


def test_two_repositories_keep_their_own_chains(vm: Vm) -> None:
    a, b = "aaaa", "bbbb"
    a1, b1 = _full(vm, a), _full(vm, b)
    write(vm.url, 1 * MiB, 64 * KiB, 0x01)
    with _exported(_live(vm, repo=a), since=a1) as export:
        assert _dirty(export) == [(1 * MiB, 64 * KiB)]
        a2 = export.checkpoint
    write(vm.url, 3 * MiB, 64 * KiB, 0x02)
    with _exported(_live(vm, repo=b), since=b1) as export:
        assert _dirty(export) == [(1 * MiB, 64 * KiB), (3 * MiB, 64 * KiB)]
        b2 = export.checkpoint
    with _exported(_live(vm, repo=a), since=a2) as export:
        assert _dirty(export) == [(3 * MiB, 64 * KiB)]
        a3 = export.checkpoint
    assert _repo_bitmaps(vm) == {a3: True, b2: True}


def test_a_failed_session_keeps_its_checkpoint_and_the_next_merge_counts_it(vm: Vm) -> None:
    first = _full(vm)
    write(vm.url, 1 * MiB, 64 * KiB, 0xA1)
    with pytest.raises(RuntimeError), _exported(_live(vm), since=first) as export:
        failed = export.checkpoint
        raise RuntimeError("the upload broke")
    assert _repo_bitmaps(vm) == {first: False, failed: True}
    assert _leftovers(vm) == []
    write(vm.url, 6 * MiB, 64 * KiB, 0xA2)
    with _exported(_live(vm), since=first) as export:
        assert export.mode == "incremental"
        assert _dirty(export) == [(1 * MiB, 64 * KiB), (6 * MiB, 64 * KiB)]
        last = export.checkpoint
    assert _repo_bitmaps(vm) == {last: True}


def test_a_session_reports_the_checkpoints_and_refuses_one_the_disk_lacks(vm: Vm) -> None:
    with _live(vm) as session:
        assert session.checkpoints == {"vda": []}
    first = _full(vm)
    with _live(vm) as session:
        (found,) = session.checkpoints["vda"]
        assert (found.name, found.seq, found.inconsistent) == (first, 1, False)
        with pytest.raises(SessionError, match=f"diskferry-{REPO}-9 of disk vda is missing"):
            session.start({"vda": f"diskferry-{REPO}-9"})
    assert _repo_bitmaps(vm) == {first: True}
    assert _leftovers(vm) == []


_KILLED_SESSION = """
import sys, time
from diskferry.qemu.session import BackupSession, SessionDisk
volume, qmp, since, nbd = sys.argv[1:5]
disk = SessionDisk("vda", volume)
session = BackupSession([disk], "repo1", qmp_socket=qmp or None, nbd_socket=nbd or None)
with session as opened:
    exports = opened.start({"vda": since or None})
    print(exports[0].url, flush=True)
    time.sleep(60)
"""


def _kill_a_session(volume: str, qmp_socket: str, since: str, nbd_socket: str) -> str:
    """Run a session in a process, SIGKILL it once it exports, and return its export URL."""
    argv = [sys.executable, "-c", _KILLED_SESSION, volume, qmp_socket, since, nbd_socket]
    killed = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout is not None
        return killed.stdout.readline().strip()
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()


def test_a_killed_session_loses_no_write_and_its_leftovers_go(vm: Vm) -> None:
    first = _full(vm)
    write(vm.url, 1 * MiB, 64 * KiB, 0x61)
    assert _kill_a_session(vm.disk.volume, vm.qmp_socket, first, vm.nbd_socket).startswith(
        "nbd+unix:///vda"
    )
    left = _leftovers(vm)
    assert {"diskferry-export-0", "diskferry-fleece-0", "disk.raw.cbt.qcow2.fleece.qcow2"} <= set(
        left
    )
    write(vm.url, 0, 64 * KiB, 0x66)
    with _exported(_live(vm), since=first) as export:
        assert export.mode == "incremental"
        assert _dirty(export) == [(0, 64 * KiB), (1 * MiB, 64 * KiB)]
    assert _leftovers(vm) == []


def test_a_killed_session_s_own_nbd_server_is_replaced(vm: Vm) -> None:
    with Qmp(vm.qmp_socket) as qmp:
        qmp.command("nbd-server-stop")
    url = _kill_a_session(vm.disk.volume, vm.qmp_socket, "", "")
    socket_path = url.split("socket=", 1)[1]
    assert os.path.exists(socket_path)
    session = BackupSession([SessionDisk("vda", vm.disk.volume)], REPO, qmp_socket=vm.qmp_socket)
    with _exported(session) as export:
        assert export.url == url
        assert read(export.url, 0, 4) == b"\0" * 4
    assert not os.path.exists(os.path.dirname(socket_path))
    assert _leftovers(vm) == []
    with Qmp(vm.qmp_socket) as qmp:
        qmp.command("nbd-server-start", addr={"type": "unix", "data": {"path": vm.nbd_socket}})


def test_a_killed_session_on_a_stopped_disk_loses_no_write(cbt_volume: cbt.CbtDisk) -> None:
    overlay = cbt_volume.overlay
    assert overlay is not None
    with _exported(_stopped(overlay)) as export:
        first = export.checkpoint
    write(overlay, 2 * MiB, 64 * KiB, 0x71)
    _kill_a_session(cbt_volume.volume, "", first, "")
    deadline = time.monotonic() + 20
    while True:
        try:
            write(overlay, 9 * MiB, 64 * KiB, 0x72)
            break
        except subprocess.CalledProcessError:
            assert time.monotonic() < deadline, "the killed session's daemon kept the disk"
            time.sleep(0.05)
    with _exported(_stopped(overlay), since=first) as export:
        assert export.mode == "incremental"
        assert _dirty(export) == [(2 * MiB, 64 * KiB), (9 * MiB, 64 * KiB)]
    assert sorted(os.listdir(os.path.dirname(overlay))) == ["disk.raw", "disk.raw.cbt.qcow2"]


def test_a_second_session_against_the_same_qemu_is_refused(vm: Vm) -> None:
    with _exported(_live(vm)) as export:
        with pytest.raises(Busy, match=r"the QEMU at .* is in use by another diskferry process"):
            _live(vm).__enter__()
        assert read(export.url, 0, 4) == b"\0" * 4
    assert _leftovers(vm) == []


def test_an_inconsistent_checkpoint_is_reported_refused_and_removed(
    cbt_volume: cbt.CbtDisk,
) -> None:
    overlay = cbt_volume.overlay
    assert overlay is not None
    with _exported(_stopped(overlay)) as export:
        first = export.checkpoint
    killed = bare_daemon(overlay)
    try:
        deadline = time.monotonic() + 20
        while "in-use" not in image_bitmaps(overlay).get(first, []):
            assert time.monotonic() < deadline, "the daemon never opened the overlay"
            time.sleep(0.05)
    finally:
        killed.kill()
        killed.wait()
    assert "in-use" in image_bitmaps(overlay)[first]
    assert cbt.status(overlay).checkpoints[-1].in_use
    with _stopped(overlay) as session:
        assert [(c.name, c.inconsistent) for c in session.checkpoints["vda"]] == [(first, True)]
        with pytest.raises(SessionError, match=f"{first} of disk vda is missing or inconsistent"):
            session.start({"vda": first})
    with _exported(_stopped(overlay)) as export:
        assert export.mode == "full"
        assert export.checkpoint == f"diskferry-{REPO}-2"
    assert sorted(image_bitmaps(overlay)) == ["diskferry-base", f"diskferry-{REPO}-2"]


def test_all_disks_of_a_vm_in_one_session(tmp_path: Path) -> None:
    disks = []
    for name in ("vda", "vdb"):
        path = tmp_path / f"{name}.raw"
        with open(path, "wb") as f:
            f.truncate(16 * MiB)
        disks.append(cbt.enable(str(path)))
    specs = [SessionDisk(n, d.volume) for n, d in zip(("vda", "vdb"), disks, strict=True)]
    with BackupSession(specs, REPO) as session:
        exports = session.start({})
        assert [(e.name, e.size, e.mode) for e in exports] == [
            ("vda", 16 * MiB, "full"),
            ("vdb", 16 * MiB, "full"),
        ]
        checkpoints = [e.checkpoint for e in exports]
    for disk, name in zip(disks, ("vda", "vdb"), strict=True):
        assert disk.overlay is not None
        write(disk.overlay, 2 * MiB if name == "vda" else 3 * MiB, 64 * KiB, 0x77)
    since = dict(zip(("vda", "vdb"), checkpoints, strict=True))
    with BackupSession(specs, REPO) as session:
        exports = session.start(since)
        assert [_dirty(e) for e in exports] == [[(2 * MiB, 64 * KiB)], [(3 * MiB, 64 * KiB)]]


def test_an_unreachable_guest_agent_fails_before_the_checkpoint(vm: Vm, tmp_path: Path) -> None:
    session = BackupSession(
        [SessionDisk("vda", vm.disk.volume)],
        REPO,
        qmp_socket=vm.qmp_socket,
        nbd_socket=vm.nbd_socket,
        qga_socket=str(tmp_path / "qga.sock"),
    )
    assert session.consistency == "filesystems frozen"
    with pytest.raises(QmpError, match="cannot connect"), _exported(session):
        pass
    assert _repo_bitmaps(vm) == {}
    assert _leftovers(vm) == []
    assert _live(vm).consistency == "crash-consistent"


def test_a_checkpoint_taken_amid_writes_splits_them_without_losing_one(vm: Vm) -> None:
    blocks = 256
    commands: list[str] = []
    for i in range(blocks):
        commands += ["-c", f"write -P {i % 255 + 1} {i * 64 * KiB} {64 * KiB}"]
    writer = subprocess.Popen(
        ["qemu-io", "-f", "raw", *commands, vm.url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with _exported(_live(vm)) as export:
            first = export.checkpoint
            image = read(export.url, 0, blocks * 64 * KiB)
    finally:
        assert writer.wait(60) == 0
    seen = []
    for i in range(blocks):
        block = image[i * 64 * KiB : (i + 1) * 64 * KiB]
        assert block in (bytes(64 * KiB), bytes([i % 255 + 1]) * (64 * KiB)), f"block {i} mixed"
        seen.append(block[0] != 0)
    before = seen.count(True)
    assert seen == [True] * before + [False] * (blocks - before)
    with _exported(_live(vm), since=first) as export:
        dirty = _dirty(export)
    if before == blocks:
        assert dirty == []
    else:
        assert dirty == [(before * 64 * KiB, (blocks - before) * 64 * KiB)]


def _zero_map(export: DiskExport) -> list[tuple[int, int, bool]]:
    """(start, length, zero) of the export's map, as a full backup reads it."""
    with NbdVolume.open(export.url, data_file=export.data_file) as volume:
        assert volume.data_file is not None
        return [(e.start, e.length, e.zero) for e in volume.extents("zero")]


def _raw_has_data(volume: str, offset: int) -> bool:
    with FileVolume(volume) as raw:
        return not next(raw.extents("zero", offset, 1)).zero


def test_a_full_point_maps_what_was_unmapped_or_written_after_it_as_data(vm: Vm) -> None:
    write(vm.url, 4 * MiB, 64 * KiB, 0x11)
    with _exported(_live(vm)) as export:
        assert export.data_file == vm.disk.volume
        unmap = ["qemu-io", "-f", "raw", "-c", f"write -z -u {4 * MiB} {64 * KiB}", vm.url]
        subprocess.run(unmap, check=True, capture_output=True)
        assert not _raw_has_data(vm.disk.volume, 4 * MiB)  # the raw map alone would skip it
        write(vm.url, 8 * MiB, 64 * KiB, 0x22)
        data = [(s, n) for s, n, zero in _zero_map(export) if not zero]
        assert data == [(4 * MiB, 64 * KiB), (8 * MiB, 64 * KiB)]
        assert read(export.url, 4 * MiB, 64 * KiB) == b"\x11" * (64 * KiB)
        assert read(export.url, 8 * MiB, 4) == b"\0" * 4


def test_a_point_whose_raw_volume_cannot_be_opened_keeps_qemu_s_map(vm: Vm, tmp_path: Path) -> None:
    write(vm.url, 4 * MiB, 64 * KiB, 0x11)
    other = tmp_path / "other.raw"
    other.write_bytes(b"\0" * MiB)
    with _exported(_live(vm)) as export:
        for data_file in (str(tmp_path / "gone.raw"), str(other)):
            with NbdVolume.open(export.url, data_file=data_file) as volume:
                assert volume.data_file is None
                data = [(e.start, e.length) for e in volume.extents("zero") if not e.zero]
            assert data == [(4 * MiB, 64 * KiB)], data_file
