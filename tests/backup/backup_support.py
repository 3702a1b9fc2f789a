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

from diskferry.backup.engine import run_backup
from diskferry.backup.entries import Entry
from diskferry.backup.job import BackupJob, BackupResult, DiskSource, RestoreJob
from diskferry.backup.repository import Repository
from diskferry.backup.restore import run_restore
from diskferry.backup.snapshots import SnapshotInfo
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
    fields = json.loads(store.get("config"))
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
