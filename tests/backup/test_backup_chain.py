"""Full and incremental backups of a CBT volume written through its overlay: each point restores."""

import random
import subprocess
import threading
import time

import pytest
from backup_support import (  # noqa: F401
    KiB,
    MiB,
    engine_fixture,
    make_disk,
    same,
    write,
    write_random,
)

from diskferry.backup.check import check
from diskferry.backup.engine import run_backup
from diskferry.backup.job import BackupJob, DiskSource
from diskferry.backup.prune import prune
from diskferry.backup.repository import Repository
from diskferry.base.errors import CancelledError
from diskferry.disk.progress import Progress
from diskferry.worker.reporter import EventType, Reporter


def test_full_then_incrementals_restore_exactly_and_upload_what_changed(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    first = engine.backup(disks={"root": volume}).disks[0]
    assert (first.type, first.reason) == ("full", "no earlier backup of this disk")
    assert 4 * MiB + 12_345 <= first.bytes_read <= 4 * MiB + 16 * KiB  # the data, no holes
    engine.keep(first.snapshot, volume)

    for block in random.Random(1).sample(range(512), 10):  # scattered, incompressible
        write_random(overlay, block * 64 * KiB, 64 * KiB)
    second = engine.backup(disks={"root": volume}).disks[0]
    engine.keep(second.snapshot, volume)
    assert second.type == "incremental"
    assert second.reason.startswith("changes since checkpoint")
    assert second.bytes_read == second.bytes_new == 10 * 64 * KiB
    # what changed and a little framing, not 10 x 1 MiB chunks
    assert 10 * 64 * KiB < second.bytes_uploaded < 10 * 64 * KiB * 1.02 + 8 * KiB

    write(overlay, 3 * MiB + 5, 100, 0x77)  # unaligned, inside the data
    third = engine.backup(disks={"root": volume}).disks[0]
    engine.keep(third.snapshot, volume)
    assert third.type == "incremental"
    assert third.bytes_read == 64 * KiB

    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot), snapshot


def test_a_chain_of_ten_survives_forgetting_a_middle_point(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    points = [engine.backup(disks={"d": volume}).disks[0]]
    engine.keep(points[0].snapshot, volume)
    rnd = random.Random(2)
    for i in range(10):
        for _ in range(3):
            write(overlay, rnd.randrange(0, 32 * MiB - 200 * KiB), rnd.randrange(1, 200 * KiB), i)
        if i in (4, 5):  # what point 5 alone holds: point 6 overwrites it
            write(overlay, 8 * MiB, 128 * KiB, 0xE0 + i)
        points.append(engine.backup(disks={"d": volume}).disks[0])
        engine.keep(points[-1].snapshot, volume)
    assert [p.type for p in points] == ["full"] + ["incremental"] * 10
    middle = points[5].snapshot
    with Repository.open(engine.url, "correct horse") as repo:
        repo.forget([middle])
        prune(repo, repack_share=0.01)
        assert check(repo, read_data=True).ok
    del engine.references[middle]
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot), snapshot
    # the chain goes on from the newest point
    write(overlay, 0, 4096, 0x99)
    after = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(after.snapshot, volume)
    assert after.type == "incremental"
    assert engine.restores_exactly(after.snapshot)


def test_broken_chains_and_limits_make_a_full_backup_saying_why(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    disks = {"d": volume}
    first = engine.backup(disks=disks).disks[0]

    checkpoint = engine_checkpoint(engine, first.snapshot)
    subprocess.run(["qemu-img", "bitmap", "--remove", overlay, checkpoint], check=True)
    removed = engine.backup(disks=disks).disks[0]
    assert removed.type == "full"
    assert f"checkpoint {checkpoint} missing on the disk" in removed.reason

    with Repository.open(engine.url, "correct horse") as repo:
        repo.forget([removed.snapshot])
    forgotten = engine.backup(disks=disks).disks[0]
    assert forgotten.type == "full"
    assert f"snapshot {removed.snapshot}" in forgotten.reason
    assert "missing from the repository" in forgotten.reason

    assert engine.backup(disks=disks, max_incrementals=2).disks[0].type == "incremental"
    assert engine.backup(disks=disks, max_incrementals=2).disks[0].type == "incremental"
    limited = engine.backup(disks=disks, max_incrementals=2).disks[0]
    assert limited.type == "full"
    assert "2 incrementals since the last full reached the limit of 2" in limited.reason

    asked = engine.backup(disks=disks, full=True).disks[0]
    assert (asked.type, asked.reason) == ("full", "a full backup was asked for (--full)")
    assert engine.backup(disks=disks).disks[0].type == "incremental"

    from diskferry.backup.engine import reset_chain

    with Repository.open(engine.url, "correct horse") as repo:
        assert reset_chain(repo, "vm") == ["d"]
    reset = engine.backup(disks=disks).disks[0]
    assert reset.type == "full" and "the chain was reset" in reset.reason
    write(overlay, 0, 4096, 1)
    last = engine.backup(disks=disks).disks[0]
    engine.keep(last.snapshot, volume)
    assert last.type == "incremental"
    assert engine.restores_exactly(last.snapshot)


def test_max_incrementals_defaults_to_the_repository_setting(tmp_path, new_repo, monkeypatch):
    from backup_support import Engine

    url = str(tmp_path / "repo1")
    new_repo(url, chunk_size=MiB, max_incrementals=1)
    monkeypatch.setenv("DISKFERRY_PASSWORD", "correct horse")
    eng = Engine(url, tmp_path)
    volume = make_disk(tmp_path / "disk.raw")
    kinds = [eng.backup(disks={"d": volume}).disks[0].type for _ in range(4)]
    assert kinds == ["full", "incremental", "full", "incremental"]


def test_a_raw_volume_without_cbt_is_full_each_time_and_uploads_only_changes(engine, tmp_path):
    volume = make_disk(tmp_path / "plain.raw", tracked=False)
    first = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(first.snapshot, volume)
    assert first.type == "full" and not first.cbt
    assert "CBT is off" in first.reason and f"diskferry cbt enable {volume}" in first.reason
    with open(volume, "r+b") as f:
        f.seek(20 * MiB + 100)
        f.write(b"changed")
    second = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(second.snapshot, volume)
    assert second.type == "full"
    assert second.bytes_read == first.bytes_read
    assert second.bytes_new == MiB  # one chunk changed
    assert second.bytes_uploaded < first.bytes_uploaded / 3
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot)


def test_several_disks_of_one_vm_in_one_backup(engine, tmp_path):
    a = make_disk(tmp_path / "a.raw")
    b = make_disk(tmp_path / "b.raw", size=24 * MiB + 4096 * 3)
    result = engine.backup(disks={"a": a, "b": b})
    assert {d.disk for d in result.disks} == {"a", "b"}
    for d in result.disks:
        engine.keep(d.snapshot, a if d.disk == "a" else b)
    write(b + ".cbt.qcow2", 24 * MiB, 4096 * 3, 0x31)
    again = engine.backup(disks={"a": a, "b": b})
    assert [d.type for d in again.disks] == ["incremental", "incremental"]
    assert [d.bytes_read for d in again.disks] == [0, 4096 * 3]
    for d in again.disks:
        engine.keep(d.snapshot, a if d.disk == "a" else b)
    assert len({d.snapshot for d in again.disks}) == 2
    with Repository.open(engine.url, "correct horse") as repo:
        infos = [s for s in repo.list_snapshots("vm") if s.backup == again.backup]
    assert len(infos) == 2
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot)


def engine_checkpoint(eng, snapshot: str) -> str:
    """The checkpoint a snapshot was taken at."""
    with Repository.open(eng.url, "correct horse") as repo:
        return repo.load_snapshot(repo.find_snapshot(snapshot)).info.checkpoint


def test_an_overlay_path_and_an_nbd_url_are_disks_too(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    assert engine.backup(disks={"d": overlay}).disks[0].type == "full"
    write(overlay, 0, 4096, 0x12)
    by_overlay = engine.backup(disks={"d": overlay}).disks[0]
    assert by_overlay.type == "incremental"
    engine.keep(by_overlay.snapshot, volume)

    plain = make_disk(tmp_path / "plain.raw", tracked=False)
    sock = tmp_path / "nbd.sock"
    server = subprocess.Popen(
        ["qemu-nbd", "-r", "-f", "raw", "-k", str(sock), "-x", "e", "--persistent", plain]
    )
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        url = f"nbd+unix:///e?socket={sock}"
        served = engine.backup("nbd-vm", {"e": url}).disks[0]
    finally:
        server.terminate()
        server.wait(10)
    assert (served.type, served.cbt) == ("full", False)
    assert "NBD export without a checkpoint" in served.reason
    assert served.bytes_read < 5 * MiB  # holes are not read
    engine.keep(served.snapshot, plain)
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot)


def test_a_checkpoint_a_killed_qemu_left_inconsistent_makes_a_full_backup(engine, tmp_path):
    from qemu_helpers import bare_daemon, image_bitmaps

    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    first = engine.backup(disks={"d": volume}).disks[0]
    checkpoint = engine_checkpoint(engine, first.snapshot)
    killed = bare_daemon(overlay)
    try:
        deadline = time.monotonic() + 20
        while "in-use" not in image_bitmaps(overlay).get(checkpoint, []):
            assert time.monotonic() < deadline, "the daemon never opened the overlay"
            time.sleep(0.05)
    finally:
        killed.kill()
        killed.wait()
    broken = engine.backup(disks={"d": volume}).disks[0]
    assert (broken.type, broken.reason) == ("full", "checkpoint bitmap inconsistent")
    engine.keep(broken.snapshot, volume)
    write(overlay, 0, 4096, 0x21)
    after = engine.backup(disks={"d": volume}).disks[0]
    assert after.type == "incremental"
    engine.keep(after.snapshot, volume)
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot)


def test_a_backup_of_a_cbt_disk_runs_no_qemu_img_info(engine, tmp_path, monkeypatch):
    from diskferry.qemu import img

    volume = make_disk(tmp_path / "disk.raw")
    engine.backup(disks={"d": volume})
    write(volume + ".cbt.qcow2", 0, 4096, 0x42)
    asked = []
    info = img.info
    monkeypatch.setattr(
        img, "info", lambda path, *a, **k: asked.append(path) or info(path, *a, **k)
    )
    assert engine.backup(disks={"d": volume}).disks[0].type == "incremental"
    assert asked == []


def test_an_incremental_asks_for_the_dirty_map_once(engine, tmp_path, monkeypatch):
    from diskferry.nbd.client import NbdClient

    volume = make_disk(tmp_path / "disk.raw")
    engine.backup(disks={"d": volume})
    for block in range(0, 512, 7):
        write(volume + ".cbt.qcow2", block * 64 * KiB, 4096, 0x42)
    asked = []
    status = NbdClient.block_status
    monkeypatch.setattr(NbdClient, "block_status", lambda c, *a: asked.append(a) or status(c, *a))
    point = engine.backup(disks={"d": volume}).disks[0]
    assert (point.type, point.bytes_read) == ("incremental", 74 * 64 * KiB)
    assert asked == [(0, 32 * MiB)]


def test_a_full_backup_of_a_large_sparse_volume_reads_only_its_data(engine, tmp_path):
    # QEMU passes the raw volume's holes up through the overlay only on smaller volumes
    volume = make_disk(tmp_path / "disk.raw", size=64 * 1024 * MiB)
    point = engine.backup(disks={"d": volume}).disks[0]
    assert point.type == "full"
    assert 4 * MiB + 12_345 <= point.bytes_read <= 4 * MiB + 16 * KiB
    out = tmp_path / "out.raw"
    engine.restore(point.snapshot, out)
    assert same(out, volume)


def test_a_stopped_cbt_disk_s_bytes_are_read_from_its_volume_not_over_nbd(
    engine, tmp_path, monkeypatch
):
    from diskferry.nbd.client import NbdClient

    volume = make_disk(tmp_path / "disk.raw")
    over_nbd = []
    for name in ("read_into", "read_many"):
        real = getattr(NbdClient, name)

        def counted(self, *args, _real=real, _name=name, **kwargs):
            over_nbd.append(_name)
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(NbdClient, name, counted)
    full = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(full.snapshot, volume)
    write(volume + ".cbt.qcow2", 5 * MiB, 64 * KiB, 0x42)
    incremental = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(incremental.snapshot, volume)
    assert (full.type, incremental.type) == ("full", "incremental")
    assert incremental.bytes_read == 64 * KiB
    assert over_nbd == []
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot)


def test_a_stopped_cbt_disk_is_its_own_point_with_no_fleecing_and_no_allocation_status(
    engine, tmp_path, monkeypatch
):
    from diskferry.nbd.client import NbdClient
    from diskferry.qemu.qmp import Qmp

    volume = make_disk(tmp_path / "disk.raw")
    commands, asked = [], []
    real_command, real_connect = Qmp.command, NbdClient.connect.__func__

    def command(self, execute, *args, **kwargs):
        commands.append(execute)
        if execute == "transaction":
            commands.extend(a["type"] for a in kwargs["actions"])
        return real_command(self, execute, *args, **kwargs)

    def connect(cls, url, *args, contexts=(), **kwargs):
        asked.append(list(contexts))
        return real_connect(cls, url, *args, contexts=contexts, **kwargs)

    monkeypatch.setattr(Qmp, "command", command)
    monkeypatch.setattr(NbdClient, "connect", classmethod(connect))
    full = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(full.snapshot, volume)
    write(volume + ".cbt.qcow2", 5 * MiB, 64 * KiB, 0x42)
    incremental = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(incremental.snapshot, volume)
    assert (full.type, incremental.type) == ("full", "incremental")
    assert 4 * MiB + 12_345 <= full.bytes_read <= 4 * MiB + 16 * KiB  # the raw volume's holes
    assert incremental.bytes_read == 64 * KiB
    assert not {"blockdev-add", "blockdev-backup", "blockdev-del", "block-job-cancel"} & set(
        commands
    )
    assert asked == [[], ["qemu:dirty-bitmap:diskferry-merge"]]
    assert not list(tmp_path.glob("*fleece*"))
    for snapshot in engine.references:
        assert engine.restores_exactly(snapshot)


class CancelAtDisk(Reporter):
    """Cancels the backup as it starts on the disk `name`."""

    def __init__(self, name: str, cancel: threading.Event) -> None:
        self.name, self.cancel = name, cancel

    def event(self, type: EventType, reason: str, message: str) -> None:
        if message.startswith(f"disk {self.name}:"):
            self.cancel.set()


def test_a_backup_that_fails_on_its_second_disk_leaves_no_snapshot_of_the_first(engine, tmp_path):
    a = make_disk(tmp_path / "a.raw")
    b = make_disk(tmp_path / "b.raw")
    job = BackupJob(
        repo=engine.url,
        vm="vm",
        disks=[DiskSource(name="a", path=a), DiskSource(name="b", path=b)],
    )
    cancel = threading.Event()
    with pytest.raises(CancelledError):
        run_backup(job, Progress(), cancel, CancelAtDisk("b", cancel))
    with Repository.open(engine.url, "correct horse") as repo:
        assert repo.list_snapshots("vm") == []
        assert repo.load_tracker("vm") is None


class SnapshotsAtDisk(Reporter):
    """Records the repository's snapshots as the backup starts on the disk `name`."""

    def __init__(self, name: str, url: str) -> None:
        self.name, self.url = name, url
        self.seen: list[str] | None = None

    def event(self, type: EventType, reason: str, message: str) -> None:
        if message.startswith(f"disk {self.name}:"):
            with Repository.open(self.url, "correct horse") as repo:
                self.seen = [s.disk for s in repo.list_snapshots("vm")]


def test_no_disk_s_snapshot_is_stored_before_every_disk_was_read(engine, tmp_path):
    """A backup killed on its second disk (SIGKILL: no handler runs) leaves the first disk's
    snapshot only if it was stored by then: none is, until all disks were read."""
    a = make_disk(tmp_path / "a.raw")
    b = make_disk(tmp_path / "b.raw")
    job = BackupJob(
        repo=engine.url,
        vm="vm",
        disks=[DiskSource(name="a", path=a), DiskSource(name="b", path=b)],
    )
    watch = SnapshotsAtDisk("b", engine.url)
    result = run_backup(job, Progress(), None, watch)
    assert watch.seen == []
    with Repository.open(engine.url, "correct horse") as repo:
        stored = {s.disk: s.id for s in repo.list_snapshots("vm")}
    assert stored == {d.disk: d.snapshot for d in result.disks}
    for d, volume in zip(result.disks, (a, b), strict=True):
        engine.keep(d.snapshot, volume)
        assert engine.restores_exactly(d.snapshot)
