"""No object the repository's storage holds makes diskferry read it whole into memory: an
object of any kind past its bound (docs/repository-format.md, "What a reader takes at most") is
refused, naming it, before any of it is read, on a directory (a sparse file, which costs a writer
of the storage nothing) and on S3; a check reports it and goes on."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backup_support import make_data, make_disk, run_measured, store_snapshot
from fuzzing import memory_bound

from diskferry.backup.bounds import MAX_CONFIG
from diskferry.backup.check import check
from diskferry.backup.codec import MAX_STORED
from diskferry.backup.entries import Entry
from diskferry.backup.errors import CorruptObjectError
from diskferry.backup.index import IndexEntry, encode_index, index_path
from diskferry.backup.metadata import load_metadata
from diskferry.backup.packs import pack_path, read_trailer
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import PAGE_ENTRIES, SnapshotInfo, new_snapshot_id
from diskferry.objstore.store import ObjectStore

MiB = 1 << 20
# past every bound, the largest included: on S3 an object this long is uploaded, once a test
HUGE = MAX_STORED + MiB
# what a refusal may allocate: far less than any object refused
BOUND = 8 * MiB
# an object the command line meets, and the memory a command refusing it stays under (it takes
# some 50 MiB; reading the object whole, several times the object)
CLI_HUGE = 512 * MiB
CLI_PEAK = 256 * MiB
PASSWORD = "correct horse"
EXE = str(Path(sys.executable).with_name("diskferry"))
_LENGTH = struct.Struct("<I")
_PACK_TAIL = struct.Struct("<I8s")
_PAGE_ROW = struct.Struct("<QQII")

Plant = Callable[..., str]


def put_object(
    url: str, path: str, *, size: int = HUGE, head: bytes = b"", tail: bytes = b""
) -> str:
    """Put an object at `path` in the repository at `url`: `head`, zeros, then `tail`, `size`
    bytes in all (a sparse file on a directory); its path."""
    if not url.startswith("s3://"):
        full = os.path.join(url, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            _sparse(f, size, head, tail)
        return path
    with tempfile.TemporaryFile() as f:
        _sparse(f, size, head, tail)
        f.seek(0)
        ObjectStore(url).put_file(path, f)
    return path


def _sparse(f, size: int, head: bytes, tail: bytes) -> None:
    f.truncate(size)
    f.write(head)
    f.seek(size - len(tail))
    f.write(tail)


@pytest.fixture
def plant(repo_url) -> Iterator[Plant]:
    """put_object into the repository at `repo_url`; what it put on S3 is removed after the test."""
    planted = []

    def put(path: str, **options: Any) -> str:
        planted.append(put_object(repo_url, path, **options))
        return path

    yield put
    if repo_url.startswith("s3://"):
        for path in planted:
            ObjectStore(repo_url).delete(path)


def _description(repo: Repository, path: str) -> bytes:
    """The sealed description of a manifest at `path` (of a disk of one byte)."""
    _, vm, disk, snapshot_id = path.split("/")
    info = SnapshotInfo(
        id=snapshot_id,
        vm=vm,
        disk=disk,
        backup="b",
        disk_size=1,
        chunk_size=MiB,
        type="full",
        started="2026-01-01T00:00:00Z",
        finished="2026-01-01T00:00:00Z",
    )
    return repo.codec.encode_meta(info.model_dump_json().encode(), path)


def _manifest_path() -> str:
    return f"snapshots/vm/disk/{new_snapshot_id()}"


def _config(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    return plant("config"), lambda: Repository.open(repo.url, PASSWORD)


def _key_file(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    return plant(repo.key_path), lambda: Repository.open(repo.url, PASSWORD)


def _index(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    def refresh() -> None:
        [problem] = repo.refresh_index()
        raise problem

    return plant(index_path("ab" * 16)), refresh


def _tracker(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    return plant("trackers/vm"), lambda: repo.load_tracker("vm")


def _metadata(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    return plant("metadata/default.nightly"), lambda: load_metadata(repo, "default.nightly")


def _pack_trailer(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    tail = _PACK_TAIL.pack(MAX_STORED + 1, b"DFPACK01")
    path = plant(pack_path("cd" * 16), tail=tail)
    return path, lambda: read_trailer(repo.store, "cd" * 16, repo.codec, HUGE)


def _manifest_description(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    path = plant(_manifest_path(), head=b"DFMANIF2" + _LENGTH.pack(MAX_STORED + 1))
    return path, lambda: repo.load_snapshot_info(path)


def _manifest_page_table(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    path = _manifest_path()
    info = _description(repo, path)
    head = b"DFMANIF2" + _LENGTH.pack(len(info)) + info + _LENGTH.pack(MAX_STORED + 1)
    return plant(path, head=head), lambda: repo.load_snapshot(path)


def _manifest_page(repo: Repository, plant: Plant) -> tuple[str, Callable[[], object]]:
    path = _manifest_path()
    info = _description(repo, path)
    table = repo.codec.encode_meta(_PAGE_ROW.pack(0, 1, 1, MAX_STORED + 1), f"{path}#pages")
    lead = b"".join([b"DFMANIF2", _LENGTH.pack(len(info)), info, _LENGTH.pack(len(table)), table])
    plant(path, size=len(lead) + MAX_STORED + 1, head=lead)
    return path, lambda: list(repo.load_snapshot(path).entries())


KINDS = {
    "config": _config,
    "key file": _key_file,
    "index object": _index,
    "tracker": _tracker,
    "metadata": _metadata,
    "pack trailer": _pack_trailer,
    "manifest description": _manifest_description,
    "manifest page table": _manifest_page_table,
    "manifest page": _manifest_page,
}


@pytest.mark.parametrize("kind", KINDS)
def test_an_object_past_its_bound_is_refused_naming_it_without_being_read(
    repo_url, new_repo, plant, kind
):
    repo = new_repo(repo_url)
    path, read = KINDS[kind](repo, plant)
    with memory_bound(BOUND), pytest.raises(CorruptObjectError) as refused:
        read()
    assert refused.value.objects == (path,)
    assert path in refused.value.message


def test_a_lock_past_its_bound_is_no_lock_and_is_not_read(repo_url, new_repo, plant):
    repo = new_repo(repo_url)
    plant("locks/" + "ef" * 12)
    with memory_bound(BOUND), repo.lock("exclusive", "prune") as lock:
        assert repo.store.exists(lock.path)
    assert [info.path for info in repo.store.list("locks")] == ["locks/" + "ef" * 12]


def test_a_config_just_past_its_bound_is_refused(repo_url, new_repo, plant):
    new_repo(repo_url)
    plant("config", size=MAX_CONFIG + 1, head=b"{")
    with pytest.raises(CorruptObjectError, match=f"config is {MAX_CONFIG + 1} bytes long"):
        Repository.open(repo_url, PASSWORD)


def test_an_index_naming_a_chunk_longer_than_any_is_malformed(repo_url, new_repo):
    repo = new_repo(repo_url)
    path = index_path("ab" * 16)
    row = IndexEntry(bytes(32), "cd" * 16, 0, MAX_STORED + 1, 1)
    repo.store.put(path, encode_index("ab" * 16, [row], repo.codec))
    [problem] = repo.refresh_index()
    assert problem.objects == (path,)
    assert "malformed" in problem.message
    assert repo.index.totals()[0] == 0


def test_a_page_of_more_entries_than_a_page_holds_is_malformed(repo_url, new_repo):
    repo = new_repo(repo_url)
    entries = [Entry(n, 1, None, 0) for n in range(PAGE_ENTRIES + 1)]
    path = _manifest_path()
    info = SnapshotInfo.model_validate_json(repo.codec.decode_meta(_description(repo, path), path))
    info = info.model_copy(update={"disk_size": len(entries)})
    with repo.new_snapshot(path, page_entries=PAGE_ENTRIES + 1) as writer:
        writer.write(entries)
        repo.save_snapshot(writer, info)
    with pytest.raises(CorruptObjectError, match="malformed") as refused:
        list(repo.load_snapshot(path).entries())
    assert refused.value.objects == (path,)


def test_check_reports_each_object_past_its_bound_and_goes_on(repo_url, new_repo, plant):
    repo = new_repo(repo_url, chunk_size=64 * 1024)
    kept = store_snapshot(repo, "vma", make_data(4))
    other = store_snapshot(repo, "vmb", make_data(4))
    # a pack the index names, whose chunks are where the index says, but whose tail claims a
    # trailer longer than any: a check reading data reads its chunks, in pieces, and refuses it
    pack = repo.index.locate(other.entries[0].chunk).pack
    chunks = repo.store.get_range(
        pack_path(pack), 0, max(e.offset + e.length for e in repo.index.in_pack(pack))
    )
    tail = _PACK_TAIL.pack(MAX_STORED + 1, b"DFPACK01")
    planted = {
        plant(pack_path(pack), head=chunks, tail=tail),
        plant(index_path("ab" * 16)),
        plant("trackers/vm"),
        plant("snapshots/vm/disk/" + new_snapshot_id(), head=b"DFMANIF2" + _LENGTH.pack(HUGE)),
    }
    with memory_bound(4 * BOUND):
        report = check(repo, read_data=True)
    assert {p.object for p in report.problems} == planted
    manifest = next(p for p in planted if p.startswith("snapshots/"))
    assert set(report.affected) == {manifest.removeprefix("snapshots/")}
    assert report.snapshots == 3
    assert kept.info.path.removeprefix("snapshots/") not in report.affected


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DISKFERRY_PASSWORD": PASSWORD,
        "DISKFERRY_CACHE_DIR": str(tmp_path / "cli-cache"),
    }


def _fails_naming(args: list[str], env: dict[str, str], path: str) -> None:
    """The command exits 1 with one line naming the object `path`, having read none of it."""
    ran = run_measured([EXE, *args, "--no-progress"], env)
    assert ran.code == 1, ran.stderr
    assert len(ran.stderr) == 1, ran.stderr
    assert ran.stderr[0].startswith("diskferry: error: "), ran.stderr
    assert f"{path} " in ran.stderr[0]
    assert ran.peak < CLI_PEAK, f"peak RSS {ran.peak} bytes"


def test_a_backup_fails_with_one_line_naming_a_tracker_past_its_bound(tmp_path, dir_url, new_repo):
    new_repo(dir_url)
    disk = make_disk(tmp_path / "disk.raw", tracked=False)
    put_object(dir_url, "trackers/vm", size=CLI_HUGE)
    backup = ["backup", "--repo", dir_url, "--vm", "vm", "--disk", f"d={disk}"]
    _fails_naming(backup, _env(tmp_path), "trackers/vm")


@pytest.mark.parametrize("kind", ["manifest", "index object"])
def test_a_restore_fails_with_one_line_naming_an_object_past_its_bound(
    tmp_path, dir_url, new_repo, kind
):
    new_repo(dir_url)
    disk = make_disk(tmp_path / "disk.raw", tracked=False)
    backup = [EXE, "backup", "--repo", dir_url, "--vm", "vm", "--disk", f"d={disk}", "--json"]
    done = subprocess.run(backup, capture_output=True, text=True, env=_env(tmp_path), check=True)
    snapshot = json.loads(done.stdout)["disks"][0]["snapshot"]
    if kind == "manifest":
        lead = b"DFMANIF2" + _LENGTH.pack(CLI_HUGE)
        path = put_object(dir_url, f"snapshots/vm/d/{snapshot}", size=CLI_HUGE, head=lead)
    else:
        [index] = os.listdir(os.path.join(dir_url, "index"))
        path = put_object(dir_url, index_path(index), size=CLI_HUGE)
        (tmp_path / "cli-cache").rename(tmp_path / "old-cache")  # what a new host reads
    out = tmp_path / "out.raw"
    _fails_naming(["restore", snapshot, str(out), "--repo", dir_url], _env(tmp_path), path)
    assert not out.exists()
