"""A prune stopped after any one of its writes or deletes leaves a repository that checks."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from backup_support import save_snapshot

from diskferry.backup.check import check
from diskferry.backup.entries import Entry, full_entries
from diskferry.backup.prune import prune
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import SnapshotInfo, new_snapshot_id
from diskferry.objstore.store import ObjectStore

SIZE = 8_000
PASSWORD = "correct horse"


class Crash(Exception):
    """Stands for the process dying."""


def build(url, new_repo):
    """Three snapshots sharing chunks, the middle one forgotten: what the others must read."""
    repo = new_repo(url)
    data = [os.urandom(SIZE) for _ in range(24)]
    parts = (data[0:10], data[5:15] + data[20:22], data[15:24])
    expected = {}
    for n, part in enumerate(parts):
        with repo.pack_writer(pack_size=20_000, workers=1) as writer:
            ids = [writer.add(c) for c in part]
        size = len(part) * SIZE
        info = SnapshotInfo(
            id=new_snapshot_id(),
            vm=f"vm{n}",
            disk="d",
            backup="b",
            disk_size=size,
            chunk_size=SIZE,
            type="full",
            started="2026-01-01T00:00:00Z",
            finished=f"2026-01-0{n + 1}T00:00:00Z",
        )
        runs = [Entry(i * SIZE, SIZE, cid, 0) for i, cid in enumerate(ids)]
        save_snapshot(repo, info, full_entries(runs, size))
        if n == 1:
            repo.forget([info.id])
        else:
            expected[info.path] = b"".join(part)
    repo.close()
    return expected


def restored(repo, path):
    snap = repo.load_snapshot(path)
    return b"".join(repo.read_chunk(e.chunk)[e.chunk_offset :][: e.length] for e in snap.entries())


def crash_after(repo, limit):
    """Make the repository's store fail after `limit` writes and deletes."""
    count = [0]
    for name in ("put", "put_parts", "delete"):
        real = getattr(repo.store, name)

        def wrapped(*args, _real=real):
            if count[0] >= limit:
                raise Crash
            count[0] += 1
            return _real(*args)

        setattr(repo.store, name, wrapped)
    return count


def assert_intact(url, expected):
    with Repository.open(url, PASSWORD) as repo:
        report = check(repo, read_data=True)
        assert report.ok, report.problems
        for path, data in expected.items():
            assert restored(repo, path) == data


def test_prune_stopped_at_every_step(tmp_path, new_repo):
    base = str(tmp_path / "base")
    expected = build(base, new_repo)
    probe = str(tmp_path / "probe")
    shutil.copytree(base, probe)
    with Repository.open(probe, PASSWORD) as repo:
        steps = crash_after(repo, 10**9)
        stats = prune(repo, repack_share=0.2, pack_size=20_000)
    assert stats.chunks_removed == 5 and stats.packs_repacked >= 1
    assert steps[0] > 6
    for limit in range(steps[0]):
        url = str(tmp_path / f"run{limit}")
        shutil.copytree(base, url)
        with Repository.open(url, PASSWORD) as repo:
            crash_after(repo, limit)
            with pytest.raises(Crash):
                prune(repo, repack_share=0.2, pack_size=20_000)
        for lock in ObjectStore(url).list("locks/"):
            ObjectStore(url).delete(lock.path)  # the dead process's lock, as a take-over would
        assert_intact(url, expected)
        with Repository.open(url, PASSWORD) as repo:
            prune(repo, repack_share=0.2, pack_size=20_000)
            assert check(repo).unused_packs == []
        assert_intact(url, expected)


KILLED = """
import sys
from diskferry.backup.prune import prune
from diskferry.backup.repository import Repository
with Repository.open(sys.argv[1], "correct horse") as repo:
    prune(repo, repack_share=0.2, pack_size=20_000)
"""


def test_prune_killed_with_sigkill(tmp_path, new_repo):
    base = str(tmp_path / "base")
    expected = build(base, new_repo)
    for run in range(3):
        url = str(tmp_path / f"run{run}")
        shutil.copytree(base, url)
        proc = subprocess.Popen([sys.executable, "-c", KILLED, url])
        time.sleep(0.3 + 0.15 * run)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert_intact(url, expected)
        notes = []
        with Repository.open(url, PASSWORD) as repo:
            prune(repo, repack_share=0.2, pack_size=20_000, notify=notes.append)
        assert_intact(url, expected)
        assert all("is gone" in n for n in notes)
