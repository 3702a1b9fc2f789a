"""Helpers of the backup tests: CBT disks written through qemu-io, engine calls, manifests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "qemu"))

from qemu_helpers import write  # noqa: F401 (for the tests)

from diskferry.backup.bounds import MAX_CONFIG
from diskferry.backup.engine import run_backup
from diskferry.backup.entries import Entry, full_entries
from diskferry.backup.job import BackupJob, BackupResult, DiskSource, RestoreJob
from diskferry.backup.repository import Repository
from diskferry.backup.restore import run_restore
from diskferry.backup.snapshots import SnapshotInfo, new_snapshot_id
from diskferry.disk.progress import Progress
from diskferry.objstore.store import ObjectStore
from diskferry.qemu import cbt

MiB = 1 << 20
KiB = 1 << 10
DISK_SIZE = 32 * MiB
PASSWORD = "correct horse"


def save_snapshot(repo: Repository, info: SnapshotInfo, entries: Iterable[Entry]) -> None:
    """Store a manifest of `entries` described by `info`."""
    with repo.new_snapshot(info.path) as writer:
        writer.write(entries)
        repo.save_snapshot(writer, info)


def as_format_2(url: str) -> bytes:
    """Write the config of the repository at `url` as the diskferry of format 2 wrote it (commit
    fba0395: `RepoConfig.model_dump_json(indent=2)`, the same fields, no MAC); the bytes."""
    store = ObjectStore(url)
    fields = json.loads(store.get("config", limit=MAX_CONFIG))
    del fields["mac"]
    fields["version"] = 2
    old = json.dumps(fields, indent=2).encode()
    store.put("config", old)
    return old


def files_under(folder: str | os.PathLike[str]) -> dict[str, bytes]:
    """Every file under `folder` and its bytes (a symbolic link: where it points), links not
    followed."""
    found = {}
    for where, folders, names in os.walk(folder):
        for name in folders + names:
            path = os.path.join(where, name)
            if os.path.islink(path):
                found[os.path.relpath(path, folder)] = os.readlink(path).encode()
            elif not os.path.isdir(path):
                with open(path, "rb") as f:
                    found[os.path.relpath(path, folder)] = f.read()
    return found


def same(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether `qemu-img compare` finds the two images equal."""
    proc = subprocess.run(
        ["qemu-img", "compare", "-q", str(a), str(b)], capture_output=True, check=False
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


def write_random(overlay: str, offset: int, length: int) -> bytes:
    """Write fresh random bytes through the CBT overlay with qemu-io; the bytes."""
    data = os.urandom(length)
    with tempfile.NamedTemporaryFile() as source:
        source.write(data)
        source.flush()
        cmd = f"write -s {source.name} {offset} {length}"
        subprocess.run(
            ["qemu-io", "-f", "qcow2", "-c", cmd, overlay], check=True, capture_output=True
        )
    return data


def make_disk(path: Path, *, tracked: bool = True, size: int = DISK_SIZE) -> str:
    """A sparse raw volume with a few MiB of data; with its CBT overlay when `tracked`."""
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(MiB)
        f.write(os.urandom(3 * MiB + 12_345))
        f.seek(20 * MiB)
        f.write(b"\x5a" * MiB)
    if tracked:
        cbt.enable(str(path))
    return str(path)


@dataclass
class Engine:
    """Backups and restores of one repository, with reference copies of each point."""

    url: str
    root: Path
    references: dict[str, Path] = field(default_factory=dict)

    def backup(
        self, vm: str = "vm", disks: dict[str, str] | None = None, **options: object
    ) -> BackupResult:
        """Back up `disks` (name: path) of `vm`."""
        job = BackupJob(
            repo=self.url,
            vm=vm,
            disks=[DiskSource(name=n, path=p) for n, p in (disks or {}).items()],
            **options,
        )
        return run_backup(job, Progress())

    def keep(self, snapshot: str, volume: str) -> Path:
        """Save a reference copy of `volume` as it is at `snapshot`."""
        copy = self.root / f"ref-{snapshot}.raw"
        shutil.copyfile(volume, copy)
        self.references[snapshot] = copy
        return copy

    def restore(self, snapshot: str, target: str | os.PathLike[str], **options):
        """Restore `snapshot` into `target`."""
        job = RestoreJob(repo=self.url, snapshot=snapshot, target=str(target), **options)
        return run_restore(job, Progress())

    def restores_exactly(self, snapshot: str) -> bool:
        """Whether `snapshot` restores equal to its reference copy."""
        out = self.root / f"out-{snapshot}.raw"
        self.restore(snapshot, out, force=True)
        try:
            return same(out, self.references[snapshot])
        finally:
            out.unlink()


@pytest.fixture(name="engine")
def engine_fixture(tmp_path, new_repo, monkeypatch) -> Engine:
    """A directory repository with 1 MiB chunks and the password in the environment."""
    url = str(tmp_path / "repo")
    new_repo(url, chunk_size=MiB)
    monkeypatch.setenv("DISKFERRY_PASSWORD", PASSWORD)
    return Engine(url, tmp_path)


SIZE = 20_000


def make_data(n):
    """`n` pieces of SIZE bytes, half random, half one byte."""
    return [os.urandom(SIZE // 2) + bytes([i % 256]) * (SIZE // 2) for i in range(n)]


class Stored:
    """A snapshot stored by a test: its description and entries."""

    def __init__(self, info, entries):
        self.info, self.entries = info, entries

    def chunk_ids(self):
        return {e.chunk for e in self.entries if e.chunk is not None}


def store_snapshot(repo, vm, data, finished="2026-01-01T00:00:00Z"):
    """A snapshot whose disk is `data` laid end to end, with a hole after each chunk."""
    with repo.pack_writer(pack_size=50_000) as writer:
        ids = [writer.add(c) for c in data]
    runs = [Entry(i * 2 * SIZE, SIZE, cid, 0) for i, cid in enumerate(ids)]
    info = SnapshotInfo(
        id=new_snapshot_id(),
        vm=vm,
        disk="root",
        backup="b",
        disk_size=len(data) * 2 * SIZE,
        chunk_size=SIZE,
        type="full",
        started=finished,
        finished=finished,
    )
    snapshot = Stored(info, list(full_entries(runs, info.disk_size)))
    save_snapshot(repo, info, snapshot.entries)
    return snapshot


_PEAK = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = child.stderr.read()
_, status, usage = os.wait4(child.pid, 0)
sys.stdout.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}\\n")
sys.stdout.write(err.decode())
"""


@dataclass
class Measured:
    """How a command ended: its exit code, its peak resident memory in bytes, its stderr lines."""

    code: int
    peak: int
    stderr: list[str]


def run_measured(args: list[str], env: dict[str, str]) -> Measured:
    """Run the command `args` (its stdout dropped) and measure its peak resident memory."""
    ran = subprocess.run(
        [sys.executable, "-c", _PEAK, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    first, *stderr = ran.stdout.splitlines()
    code, peak_kib = map(int, first.split())
    return Measured(code, peak_kib * 1024, stderr)
