"""Memory stays bounded for a 16 TiB disk with 2 TiB of data in its manifest.

At 1 MiB chunks 2 TiB of data is 2 million entries naming 2 million chunks. Each
operation runs in a process of its own over a synthetic repository (index entries and
manifests written directly; packs of the right size holding nothing real, which only
`check --read-data` would read) and the peak RSS the kernel reports for that process
must stay under 256 MiB.
"""

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_support import save_snapshot

from diskferry.backup.config import KdfParams
from diskferry.backup.entries import Entry
from diskferry.backup.index import IndexEntry, encode_index, index_path, new_index_id
from diskferry.backup.packs import pack_path
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import SnapshotInfo
from diskferry.backup.trackers import Checkpoint, DiskChain, Tracker
from diskferry.qemu import cbt

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40
FAST_KDF = KdfParams(n=1 << 10)
BOUND = 256 * MiB
PASSWORD = "memory"
CHUNKS = 2_000_000
FORGOTTEN = 100_000  # chunks of a second snapshot, in packs of their own
PER_PACK = 4000
# a file on ext4 holds at most 16 TiB less a block
FILE_DISK = 16 * TiB - MiB

pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]  # two million chunks, built each time


# appended to each measured program: its peak RSS (VmHWM) once everything else has run
REPORT_PEAK = """
import atexit, json

def report_peak():
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    print(json.dumps({"peak": peak * 1024}))

atexit.register(report_peak)
"""


def run_measured(code: str, *args: str, env: dict[str, str]) -> tuple[dict, int]:
    """Run `code` in a new Python process: the JSON it prints, and its peak RSS in bytes.

    The peak is the process's own VmHWM: the RSS a child counts from before its exec, as
    `getrusage` reports it, would be its parent's.
    """
    proc = subprocess.run(
        [sys.executable, "-c", REPORT_PEAK + code, *args], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    *_, result, peak = proc.stdout.splitlines()
    return json.loads(result), json.loads(peak)["peak"]


def environment(cache: Path) -> dict[str, str]:
    return {**os.environ, "DISKFERRY_CACHE_DIR": str(cache), "DISKFERRY_PASSWORD": PASSWORD}


def info_of(snapshot_id: str, vm: str, size: int, **fields) -> SnapshotInfo:
    return SnapshotInfo(
        id=snapshot_id,
        vm=vm,
        disk="d",
        backup="b",
        disk_size=size,
        chunk_size=MiB,
        type="full",
        started="2026-01-01T00:00:00Z",
        finished=fields.pop("finished", "2026-01-01T00:00:00Z"),
        **fields,
    )


def spread(ids: bytes, first: int, count: int, size: int) -> Iterator[Entry]:
    """1 MiB entries naming chunks `first`.. of `ids`, eight at a time between zero runs."""
    gap = (size - count * MiB) // (count // 8 + 1)
    offset = 0
    for n in range(count):
        yield Entry(offset, MiB, ids[(first + n) * 32 : (first + n + 1) * 32], 0)
        offset += MiB
        if n % 8 == 7:
            yield Entry(offset, gap, None)
            offset += gap
    yield Entry(offset, size - offset, None)


def new_repository(url: str) -> str:
    """A new repository with 1 MiB chunks; its id."""
    with Repository.init(url, PASSWORD, chunk_size=MiB, kdf=FAST_KDF) as repo:
        return repo.id


SAVE_AND_LOAD = """
import json, random, sys
from diskferry.backup.entries import Entry
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import SnapshotInfo

MiB, TiB = 1 << 20, 1 << 40

def entries():
    rnd = random.Random(5)
    offset = 0
    for n in range(2_000_000):
        yield Entry(offset, MiB, rnd.randbytes(32), 0)
        offset += MiB
        if n % 8 == 7:
            yield Entry(offset, 7 * 8 * MiB, None)
            offset += 7 * 8 * MiB
    yield Entry(offset, 16 * TiB - offset, None)

info = SnapshotInfo(id="big", vm="vm", disk="d", backup="b", disk_size=16 * TiB,
                    chunk_size=MiB, type="full", started="s", finished="f")
with Repository.open(sys.argv[1], "memory") as repo:
    with repo.new_snapshot(info.path) as writer:
        writer.write(entries())
        repo.save_snapshot(writer, info)
    manifest = repo.load_snapshot(info.path)
    count = 0
    same = manifest.info == info
    for got, wanted in zip(manifest.entries(), entries(), strict=True):
        same = same and got == wanted
        count += 1
print(json.dumps({"entries": count, "same": same, "data": manifest.data_bytes}))
"""


def test_a_two_million_entry_manifest_is_saved_and_read_in_bounded_memory(tmp_path):
    url = str(tmp_path / "repo")
    repo_id = new_repository(url)
    result, peak = run_measured(SAVE_AND_LOAD, url, env=environment(tmp_path / "cache"))
    assert result == {"entries": 2_250_001, "same": True, "data": 2 * 10**6 * MiB}
    assert peak < BOUND
    left = [p.name for p in (tmp_path / "cache" / repo_id).iterdir()]
    assert left == ["encrypted"]  # the spool files are gone; what the host remembers stays


class Indexed:
    """A repository whose index names 2.1 million chunks, with two snapshots of a 16 TiB disk."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.url = root / "repo"
        self.cache = root / "cache"
        self.repo_id = new_repository(str(self.url))
        ids = random.Random(3).randbytes(32 * (CHUNKS + FORGOTTEN))
        with Repository.open(str(self.url), PASSWORD, cache_root=self.cache) as repo:
            self._write_index(repo, ids)
            big, small = info_of("big", "vm", 16 * TiB), info_of("small", "other", 16 * TiB)
            save_snapshot(repo, big, spread(ids, 0, CHUNKS, 16 * TiB))
            save_snapshot(repo, small, spread(ids, CHUNKS, FORGOTTEN, 16 * TiB))
        # fill the index cache once, as a first command on this machine would
        run_measured(FILL_CACHE, str(self.url), env=environment(self.cache))

    @staticmethod
    def _write_index(repo: Repository, ids: bytes) -> None:
        total = CHUNKS + FORGOTTEN
        packs = [os.urandom(16).hex() for _ in range(total // PER_PACK)]
        for pack in packs:
            path = Path(repo.url) / pack_path(pack)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(bytes(PER_PACK))
        for start in range(0, total, 65536):
            entries = [
                IndexEntry(ids[n * 32 : n * 32 + 32], packs[n // PER_PACK], n % PER_PACK, 1, MiB)
                for n in range(start, min(start + 65536, total))
            ]
            index_id = new_index_id()
            repo.store.put(index_path(index_id), encode_index(index_id, entries, repo.codec))

    def copy(self, where: Path) -> tuple[str, Path]:
        """A copy of the repository and its cache: its URL and cache root."""
        shutil.copytree(self.url, where / "repo")
        shutil.copytree(self.cache, where / "cache")
        return str(where / "repo"), where / "cache"


FILL_CACHE = """
import json, sys
from diskferry.backup.repository import Repository
with Repository.open(sys.argv[1], "memory") as repo:
    print(json.dumps({"chunks": repo.index.totals()[0]}))
"""


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Indexed:
    return Indexed(tmp_path_factory.mktemp("indexed"))


CHECK = """
import json, sys
from diskferry.backup.check import check
from diskferry.backup.repository import Repository
with Repository.open(sys.argv[1], "memory") as repo:
    report = check(repo)
print(json.dumps({"ok": report.ok, "snapshots": report.snapshots, "chunks": report.chunks,
                  "problems": [p.message for p in report.problems[:3]]}))
"""


def test_check_of_two_million_chunks_stays_in_bounded_memory(indexed, tmp_path):
    url, cache = indexed.copy(tmp_path)
    result, peak = run_measured(CHECK, url, env=environment(cache))
    assert result == {"ok": True, "snapshots": 2, "chunks": CHUNKS + FORGOTTEN, "problems": []}
    assert peak < BOUND


PRUNE = """
import json, sys
from dataclasses import asdict
from diskferry.backup.prune import prune
from diskferry.backup.repository import Repository
with Repository.open(sys.argv[1], "memory") as repo:
    repo.forget(["small"])
    stats = prune(repo)
    print(json.dumps({**asdict(stats), "left": repo.index.totals()[0]}))
"""


def test_prune_of_two_million_chunks_stays_in_bounded_memory(indexed, tmp_path):
    url, cache = indexed.copy(tmp_path)
    result, peak = run_measured(PRUNE, url, env=environment(cache))
    assert result["chunks_removed"] == FORGOTTEN
    assert result["packs_deleted"] == FORGOTTEN // PER_PACK
    assert result["left"] == CHUNKS
    assert len(list(Path(url, "packs").rglob("*/*"))) == CHUNKS // PER_PACK
    assert peak < BOUND


BACKUP = """
import json, sys
from diskferry.backup.engine import run_backup
from diskferry.backup.job import BackupJob, DiskSource
from diskferry.disk.progress import Progress
job = BackupJob(repo=sys.argv[1], vm="vm", disks=[DiskSource(name="d", path=sys.argv[2])])
disk = run_backup(job, Progress()).disks[0]
print(json.dumps({"type": disk.type, "reason": disk.reason, "snapshot": disk.snapshot,
                  "read": disk.bytes_read}))
"""

ENTRY = 64 * KiB
DIRTY = [GiB, 64 * GiB + ENTRY, CHUNKS * ENTRY - ENTRY]


def test_an_incremental_over_a_two_million_entry_parent_stays_in_bounded_memory(tmp_path):
    url = str(tmp_path / "repo")
    repo_id = new_repository(url)
    volume = tmp_path / "disk.raw"
    with open(volume, "wb") as f:
        f.truncate(CHUNKS * ENTRY)  # 128 GiB: a bigger CBT overlay takes minutes to make
    overlay = cbt.enable(str(volume)).overlay
    checkpoint = f"diskferry-{repo_id}-1"
    subprocess.run(
        ["qemu-img", "bitmap", "--add", "--enable", "-g", "64K", overlay, checkpoint], check=True
    )
    ids = random.Random(4).randbytes(32 * CHUNKS)

    def parent_entries() -> Iterator[Entry]:
        for n in range(CHUNKS):
            yield Entry(n * ENTRY, ENTRY, ids[n * 32 : n * 32 + 32], 0)

    parent = info_of("parent", "vm", CHUNKS * ENTRY, checkpoint=checkpoint)
    with Repository.open(url, PASSWORD, cache_root=tmp_path / "cache") as repo:
        save_snapshot(repo, parent, parent_entries())
        chain = DiskChain(checkpoints=[Checkpoint(name=checkpoint, snapshot=parent.id)])
        repo.save_tracker(Tracker(vm="vm", disks={"d": chain}))
    for offset in DIRTY:
        subprocess.run(
            ["qemu-io", "-f", "qcow2", "-c", f"write -P 7 {offset} {ENTRY}", overlay],
            check=True,
            capture_output=True,
        )

    result, peak = run_measured(BACKUP, url, str(volume), env=environment(tmp_path / "cache"))
    assert result["type"] == "incremental", result["reason"]
    assert result["reason"] == f"changes since checkpoint {checkpoint}"
    assert result["read"] == len(DIRTY) * ENTRY
    assert peak < BOUND
    with Repository.open(url, PASSWORD, cache_root=tmp_path / "cache") as repo:
        child = repo.load_snapshot(repo.find_snapshot(result["snapshot"]))
        assert child.info.parent == parent.id
        changed = [
            new.offset
            for new, old in zip(child.entries(), parent_entries(), strict=True)
            if new != old
        ]
    assert changed == DIRTY


RESTORE = """
import json, sys
from diskferry.backup.job import RestoreJob
from diskferry.backup.restore import run_restore
from diskferry.disk.progress import Progress
result = run_restore(RestoreJob(repo=sys.argv[1], snapshot="sparse", target=sys.argv[2]),
                     Progress())
print(json.dumps({"written": result.bytes_written, "chunks": result.chunks_read}))
"""

PIECE = 4 * KiB
DATA_EVERY = 1000


def test_a_restore_walk_over_two_million_entries_stays_in_bounded_memory(tmp_path):
    """Most entries are zeros, so little is written; every entry is still read and walked."""
    url = str(tmp_path / "repo")
    new_repository(url)
    chunks = [os.urandom(64 * KiB) for _ in range(4)]
    zero = (FILE_DISK - CHUNKS // DATA_EVERY * PIECE) // CHUNKS

    def entries(ids: list[bytes]) -> Iterator[Entry]:
        offset = 0
        for n in range(CHUNKS):
            if n % DATA_EVERY == 0:
                k = n // DATA_EVERY
                yield Entry(offset, PIECE, ids[k % 4], k % 16 * PIECE)
                offset += PIECE
            length = FILE_DISK - offset if n == CHUNKS - 1 else zero
            yield Entry(offset, length, None)
            offset += length

    with Repository.open(url, PASSWORD, cache_root=tmp_path / "cache") as repo:
        with repo.pack_writer() as writer:
            ids = [writer.add(c) for c in chunks]
        save_snapshot(repo, info_of("sparse", "vm", FILE_DISK), entries(ids))
    target = tmp_path / "restored.raw"
    try:
        result, peak = run_measured(RESTORE, url, str(target), env=environment(tmp_path / "cache"))
        assert result == {"written": CHUNKS // DATA_EVERY * PIECE, "chunks": 4}
        assert peak < BOUND
        assert target.stat().st_size == FILE_DISK
        data = [e for e in entries(ids) if e.chunk is not None]
        with open(target, "rb") as f:
            for e in data[::97]:
                f.seek(e.offset)
                k = ids.index(e.chunk)
                assert f.read(PIECE) == chunks[k][e.chunk_offset : e.chunk_offset + PIECE]
        assert target.stat().st_blocks * 512 < 64 * MiB  # zeros stayed holes
    finally:
        target.unlink(missing_ok=True)
