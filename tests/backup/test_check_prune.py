"""check (with and without reading data, and while a forget deletes manifests), forget and prune,
on a directory and on S3."""

import pytest
from backup_support import SIZE, make_data, store_snapshot

from diskferry.backup import index_cache
from diskferry.backup.check import check
from diskferry.backup.codec import MAX_STORED
from diskferry.backup.errors import CorruptObjectError
from diskferry.backup.index import decode_index, encode_index, index_path, new_index_id
from diskferry.backup.packs import pack_path
from diskferry.backup.policy import to_forget
from diskferry.backup.prune import prune
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import SnapshotInfo, lead_length, new_snapshot_id


def read_back(repo, snapshot):
    out = bytearray(snapshot.info.disk_size)
    for e in snapshot.entries:
        if e.chunk is not None:
            out[e.offset : e.end] = repo.read_chunk(e.chunk)[e.chunk_offset :][: e.length]
    return bytes(out)


def expected(data):
    return b"".join(c + bytes(SIZE) for c in data)


@pytest.fixture
def three(repo):
    data = make_data(30)
    a = store_snapshot(repo, "vma", data[0:10])
    b = store_snapshot(repo, "vmb", data[5:15])
    c = store_snapshot(repo, "vmc", data[20:30])
    return repo, data, a, b, c


def pack_of(repo, chunk):
    return pack_path(repo.index.locate(chunk).pack)


def name(snapshot):
    return snapshot.info.path.removeprefix("snapshots/")


def test_a_healthy_repository_checks(three):
    repo, _, *_ = three
    for read_data in (False, True):
        report = check(repo, read_data=read_data)
        assert report.ok, report.problems
        assert (report.snapshots, report.chunks) == (3, 25)
        assert report.packs >= 5


def test_flipped_byte_is_found_with_read_data(three):
    repo, _, a, _, c = three
    chunk = a.entries[0].chunk
    path = pack_of(repo, chunk)
    where = repo.index.locate(chunk)
    blob = bytearray(repo.store.get(path, limit=MAX_STORED))
    blob[where.offset + where.length // 2] ^= 0x40
    repo.store.put(path, bytes(blob))
    assert check(repo).ok
    report = check(repo, read_data=True)
    assert not report.ok
    assert [p.object for p in report.problems] == [path]
    assert name(a) in report.affected and report.affected[name(a)] == {path}
    assert name(c) not in report.affected
    assert path in report.summary() and name(a) in report.summary()
    with pytest.raises(CorruptObjectError, match=path):
        repo.read_chunk(chunk)


def test_missing_pack_is_found_without_read_data(three):
    repo, _, a, b, c = three
    shared = b.entries[0].chunk
    path = pack_of(repo, shared)
    repo.store.delete(path)
    report = check(repo)
    assert [p.object for p in report.problems] == [path]
    assert "missing" in report.problems[0].message
    assert name(a) in report.affected and name(b) in report.affected
    assert name(c) not in report.affected
    with pytest.raises(CorruptObjectError, match="missing"):
        repo.read_chunk(shared)


@pytest.mark.parametrize("damage", ["last byte cut", "pages cut", "bytes added"])
def test_a_manifest_of_another_length_is_reported_and_the_check_goes_on(three, damage):
    repo, _, a, _, _ = three
    stored = repo.store.get(a.info.path, limit=MAX_STORED)
    changed = {
        "last byte cut": stored[:-1],
        "pages cut": stored[: lead_length(a.info.path, stored, table=True)],
        "bytes added": stored + b"after the last page",
    }[damage]
    repo.store.put(a.info.path, changed)
    report = check(repo)
    assert [p.object for p in report.problems] == [a.info.path]
    assert "pages" in report.problems[0].message
    assert set(report.affected) == {name(a)}
    assert report.snapshots == 3
    with pytest.raises(CorruptObjectError, match=a.info.path):
        list(repo.load_snapshot(a.info.path).entries())


def test_forget_and_prune_keep_what_is_named(three):
    repo, data, a, b, c = three
    repo.forget([c.info.id])
    stats = prune(repo)
    assert stats.chunks_removed == 10
    assert stats.packs_deleted >= 1
    for chunk in c.chunk_ids():
        assert not repo.index.has(chunk)
    assert read_back(repo, a) == expected(data[0:10])
    assert read_back(repo, b) == expected(data[5:15])
    assert check(repo, read_data=True).ok


def test_prune_repacks_partly_used_packs(three):
    repo, data, a, b, c = three
    d = store_snapshot(repo, "vmd", data[0:3])  # keeps part of a's first pack in use
    repo.forget([a.info.id])
    before = {p.path for p in repo.store.list("packs/")}
    stats = prune(repo, repack_share=0.0, pack_size=50_000)
    assert stats.packs_repacked >= 1 and stats.packs_written >= 1
    assert stats.unused_bytes == 0 and stats.packs_with_unused == 0
    only_a = a.chunk_ids() - b.chunk_ids() - d.chunk_ids()
    assert only_a and all(not repo.index.has(chunk) for chunk in only_a)
    assert repo.index.totals()[0] == 23
    assert read_back(repo, b) == expected(data[5:15])
    assert read_back(repo, c) == expected(data[20:30])
    after = {p.path for p in repo.store.list("packs/")}
    assert after - before
    report = check(repo, read_data=True)
    assert report.ok and not report.unused_packs


def test_prune_removes_packs_no_index_names(three):
    repo, *_ = three
    stray = "packs/ab/" + "ab" * 16
    repo.store.put(stray, b"left by a killed backup")
    assert check(repo).unused_packs == [stray]
    prune(repo)
    assert not repo.store.exists(stray)


def test_prune_of_nothing_changes_nothing(three):
    repo, *_ = three
    before = sorted(o.path for o in repo.store.list())
    stats = prune(repo)
    assert stats.chunks_removed == 0
    assert sorted(o.path for o in repo.store.list()) == before


def test_keep_policy():
    def snap(vm, when):
        return SnapshotInfo(
            id=new_snapshot_id() + when,
            vm=vm,
            disk="d",
            backup="b",
            disk_size=1,
            chunk_size=1,
            type="full",
            started=when,
            finished=when,
        )

    days = [snap("v", f"2026-03-{d:02d}T{h:02d}:00:00Z") for d in (2, 3, 9) for h in (1, 5)]
    other = [snap("w", "2026-03-01T00:00:00Z")]
    forget = to_forget(days + other, keep_last=1, keep_daily=2)
    assert {s.finished for s in forget} == {
        "2026-03-02T01:00:00Z",
        "2026-03-02T05:00:00Z",
        "2026-03-03T01:00:00Z",
        "2026-03-09T01:00:00Z",
    }
    assert to_forget(days) == []
    weekly = to_forget(days, keep_weekly=5)
    assert {s.finished for s in days} - {s.finished for s in weekly} == {
        "2026-03-09T05:00:00Z",
        "2026-03-03T05:00:00Z",
    }


def test_a_lock_brings_a_stale_index_cache_up_to_date(three, repo_url, tmp_path):
    repo, _, a, _, c = three
    other = Repository.open(repo_url, "correct horse", cache_root=tmp_path / "elsewhere")
    assert other.index.has(c.entries[0].chunk)
    repo.forget([c.info.id])
    prune(repo)
    assert other.index.has(c.entries[0].chunk)
    with other.lock("shared", "backup"):
        assert not other.index.has(c.entries[0].chunk)
        assert other.index.has(a.entries[0].chunk)
    other.close()


def test_check_reads_every_index_object_however_warm_the_cache(three, repo_url, new_repo):
    repo, *_ = three
    assert check(repo, read_data=True).ok  # the local cache has seen every index object
    index = sorted(info.path for info in repo.store.list("index/"))[0]
    damaged = bytearray(repo.store.get(index, limit=MAX_STORED))
    damaged[len(damaged) // 2] ^= 0x01
    repo.store.put(index, bytes(damaged))
    report = check(repo, read_data=True)
    assert not report.ok and index in {p.object for p in report.problems}
    other = new_repo(repo_url + "-other")
    store_snapshot(other, "vmo", make_data(3))
    copied = next(iter(other.store.list("index/"))).path
    repo.store.put(index, other.store.get(copied, limit=MAX_STORED))
    report = check(repo, read_data=True)
    assert not report.ok and index in {p.object for p in report.problems}


@pytest.mark.parametrize("listing", [1, 2], ids=["checking manifests", "counting unused space"])
def test_a_manifest_forgotten_while_a_check_runs_is_skipped(three, monkeypatch, listing):
    repo, _, a, _, _ = three
    listed = Repository.snapshot_paths
    calls = []

    def forgotten_after_listing(self, *args, **kwargs):
        paths = listed(self, *args, **kwargs)
        calls.append(paths)
        if len(calls) == listing:
            repo.store.delete(a.info.path)  # what a forget holding a shared lock does meanwhile
        return paths

    monkeypatch.setattr(Repository, "snapshot_paths", forgotten_after_listing)
    report = check(repo)
    assert report.ok, report.problems
    assert a.info.path in calls[0]
    if listing == 1:
        assert report.snapshots == 2
    else:
        assert report.snapshots == 3
        assert report.unused.bytes > 0  # the chunks only the forgotten manifest named


def test_an_index_object_gone_while_a_check_reads_the_index_is_skipped(three, monkeypatch):
    repo, *_ = three
    # a second index object naming the chunks the first names, as two backups storing the same
    # chunks at once leave; it goes (as a prune would drop it) once the check has listed it
    first = next(iter(repo.store.list("index/"))).path
    blob = repo.store.get(first, limit=MAX_STORED)
    entries = decode_index(first.removeprefix("index/"), blob, repo.codec)
    second = new_index_id()
    repo.store.put(index_path(second), encode_index(second, entries, repo.codec))
    listed = index_cache.listing

    def gone_after_listing(store, folder, foreign=None):
        found = list(listed(store, folder, foreign))
        store.delete(index_path(second))
        return iter(found)

    monkeypatch.setattr(index_cache, "listing", gone_after_listing)
    report = check(repo, read_data=True)
    assert report.ok, report.problems
    assert (report.snapshots, report.chunks) == (3, 25)
