"""Repository round trips on a directory and S3: keys, chunks, packs, index, manifests, trackers."""

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from backup_support import save_snapshot

from diskferry.backup.bounds import MAX_CONFIG, MAX_KEY_FILE
from diskferry.backup.codec import MAX_STORED
from diskferry.backup.entries import Entry, full_entries
from diskferry.backup.errors import (
    CorruptObjectError,
    NotEmptyError,
    PasswordError,
    RepositoryError,
    RepositoryExistsError,
    RepositoryNotFoundError,
    SnapshotNotFoundError,
)
from diskferry.backup.index import decode_index
from diskferry.backup.packs import pack_path, read_trailer
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import SnapshotInfo, new_snapshot_id, now_rfc3339
from diskferry.backup.trackers import Checkpoint, DiskChain, Tracker
from diskferry.objstore.store import ObjectStore

PASSWORD = "correct horse"


def chunks(n, size=20_000, seed=0):
    """n distinct, partly compressible chunks."""
    return [os.urandom(size // 2) + bytes([(seed + i) % 256]) * (size // 2) for i in range(n)]


def write(repo, data, **options):
    options.setdefault("pack_size", 100_000)
    with repo.pack_writer(**options) as writer:
        ids = [writer.add(c) for c in data]
    return ids, writer.stats


def test_init_and_open(repo_url, new_repo, cache_dir):
    made = new_repo(repo_url, chunk_size=4 << 20, max_incrementals=7)
    with Repository.open(repo_url, PASSWORD) as opened:
        assert opened.id == made.id
        assert opened.config.chunk_size == 4 << 20
        assert opened.config.max_incrementals == 7
        assert opened.config.encrypted
    raw = made.store.get("config", limit=MAX_CONFIG)
    fields = {"id", "version", "chunk_size", "cipher", "compression", "kdf", "max_incrementals"}
    assert set(json.loads(raw)) == fields | {"mac"}
    secrets = (made.codec._keys.data, made.codec._keys.ids)
    for info in made.store.list("keys/"):
        stored = made.store.get(info.path, limit=MAX_KEY_FILE)
        for secret in secrets:
            for form in (secret, secret.hex().encode(), base64.b64encode(secret)):
                assert form not in raw and form not in stored


def test_wrong_or_missing_password(repo_url, new_repo):
    new_repo(repo_url)
    with pytest.raises(PasswordError, match=f"wrong password for repository {repo_url}"):
        Repository.open(repo_url, "not it")
    with pytest.raises(PasswordError, match="DISKFERRY_PASSWORD"):
        Repository.open(repo_url, None)


def test_no_repository_and_existing_repository(repo_url, new_repo):
    with pytest.raises(RepositoryNotFoundError, match="repo init"):
        Repository.open(repo_url, PASSWORD)
    new_repo(repo_url)
    with pytest.raises(RepositoryExistsError):
        new_repo(repo_url)


def test_init_refuses_a_place_that_holds_anything_else(repo_url, new_repo):
    store = ObjectStore(repo_url)
    store.put("photos/cat.jpg", b"not a repository")
    with pytest.raises(NotEmptyError, match=f"{repo_url} is not empty and holds no repository"):
        new_repo(repo_url)
    assert [o.path for o in store.list()] == ["photos/cat.jpg"]


def test_init_takes_an_empty_folder_or_a_new_filesystem(tmp_path, new_repo):
    (tmp_path / "empty").mkdir()
    (tmp_path / "mounted" / "lost+found").mkdir(parents=True)
    for place in ("empty", "mounted"):
        made = new_repo(str(tmp_path / place))
        assert made.store.exists("config")


def test_unencrypted_repository_needs_no_password(repo_url, new_repo):
    made = new_repo(repo_url, password=None, encrypted=False)
    assert made.config.cipher == "none"
    ids, _ = write(made, [b"plain text " * 1000])
    with Repository.open(repo_url, None) as opened:
        assert opened.read_chunk(ids[0]) == b"plain text " * 1000


def test_chunks_from_many_threads_round_trip(repo_url, new_repo, cache_dir):
    repo = new_repo(repo_url)
    data = chunks(60)
    ids = [None] * len(data)
    with repo.pack_writer(pack_size=100_000, workers=3, uploads=2) as writer:

        def add(k):
            for i in range(k, len(data), 4):
                ids[i] = writer.add(data[i])

        threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    stats = writer.stats
    assert stats.chunks_new == 60
    assert stats.bytes_new == sum(map(len, data))
    assert 0 < stats.bytes_uploaded < stats.bytes_new
    packs = list(repo.store.list("packs/"))
    assert len(packs) >= 5
    assert all(p.path.split("/")[1] == p.path.split("/")[2][:2] for p in packs)
    shutil.rmtree(cache_dir)
    with Repository.open(repo_url, PASSWORD) as fresh:
        for cid, plain in zip(ids, data, strict=True):
            assert fresh.read_chunk(cid) == plain


def test_known_chunks_are_not_stored_again(repo):
    data = chunks(10)
    _, first = write(repo, data + data)
    assert first.chunks_new == 10
    _, second = write(repo, data)
    assert (second.chunks_new, second.bytes_new, second.bytes_uploaded) == (0, 0, 0)


def test_packs_and_index_agree(repo):
    ids, _ = write(repo, chunks(12))
    indexed = {}
    for info in repo.store.list("index/"):
        name = info.path.split("/")[1]
        for e in decode_index(name, repo.store.get(info.path, limit=MAX_STORED), repo.codec):
            indexed[e.chunk_id] = e
    assert set(indexed) == set(ids)
    for pack in {e.pack for e in indexed.values()}:
        size = repo.store.head(pack_path(pack)).size
        trailer = read_trailer(repo.store, pack, repo.codec, size)
        for t in trailer:
            e = indexed[t.chunk_id]
            assert (e.pack, e.offset, e.length, e.plain_length) == (
                pack,
                t.offset,
                t.length,
                t.plain_length,
            )


def test_abort_removes_unindexed_packs(repo):
    with pytest.raises(RuntimeError, match="stop"), repo.pack_writer(pack_size=50_000) as w:
        for c in chunks(10):
            w.add(c)
        w._drain()
        raise RuntimeError("stop")
    assert list(repo.store.list("packs/")) == []
    assert list(repo.store.list("index/")) == []


def snapshot(vm, disk, size, **fields):
    when = fields.pop("finished", now_rfc3339())
    return SnapshotInfo(
        id=new_snapshot_id(),
        vm=vm,
        disk=disk,
        backup="b1",
        disk_size=size,
        chunk_size=1 << 20,
        type=fields.pop("type", "full"),
        started=when,
        finished=when,
        **fields,
    )


def test_snapshot_round_trip_and_listing(repo):
    ids, _ = write(repo, chunks(3))
    entries = list(
        full_entries(
            [
                Entry(0, 20_000, ids[0], 0),
                Entry(50_000, 100, ids[1], 7),
                Entry(60_000, 9, ids[2], 0),
            ],
            1 << 20,
        )
    )
    first = snapshot("vm1", "root", 1 << 20, reason="no tracker", tags=["daily"])
    save_snapshot(repo, first, entries)
    later = "2999-01-01T00:00:00Z"
    second = snapshot("vm2", "data", 20_005, finished=later, parent=first.id)
    save_snapshot(repo, second, [*entries[:1], Entry(20_000, 5, None)])
    loaded = repo.load_snapshot(first.path)
    assert loaded.info == first and list(loaded.entries()) == entries
    assert loaded.data_bytes == 20_109
    assert [s.id for s in repo.list_snapshots()] == [first.id, second.id]
    assert [s.id for s in repo.list_snapshots("vm2")] == [second.id]
    assert repo.find_snapshot(second.id) == second.path
    with pytest.raises(SnapshotNotFoundError):
        repo.find_snapshot("0000")


def test_many_entries_stay_compact_and_come_back_in_pages(repo):
    chunk = os.urandom(32)
    entries = [
        Entry(i * 4096, 4096, None) if i % 2 else Entry(i * 4096, 4096, chunk, i)
        for i in range(200_000)
    ]
    info = snapshot("vm", "d", 200_000 * 4096)
    save_snapshot(repo, info, iter(entries))
    assert repo.store.head(info.path).size < 2_000_000
    reads = []
    get_range = repo.store.get_range
    repo.store.get_range = lambda *args: reads.append(args) or get_range(*args)
    loaded = repo.load_snapshot(info.path)
    assert reads == []  # the description and the page table come with the start
    assert list(loaded.entries()) == entries
    assert len(reads) == -(-200_000 // 16384)  # then one ranged read a page
    assert repo.load_snapshot_info(info.path) == info
    info.tags = [os.urandom(20_000).hex()]
    info.id = new_snapshot_id()
    save_snapshot(repo, info, entries)
    assert repo.load_snapshot_info(info.path) == info
    assert list(repo.load_snapshot(info.path).entries()) == entries


def test_an_older_repository_or_manifest_is_refused_clearly(repo, repo_url):
    info = snapshot("vm", "d", 100)
    repo.store.put(info.path, (200).to_bytes(4, "little") + os.urandom(300))
    with pytest.raises(CorruptObjectError, match=r"not a manifest of format 2.*older diskferry"):
        repo.load_snapshot_info(info.path)
    with pytest.raises(CorruptObjectError, match="not a manifest of format 2"):
        repo.load_snapshot(info.path)
    config = json.loads(repo.store.get("config", limit=MAX_CONFIG))
    del config["mac"]
    repo.store.put("config", json.dumps({**config, "version": 2}).encode())
    with pytest.raises(RepositoryError, match="format 2, whose config is not authenticated; this"):
        Repository.open(repo_url, PASSWORD)
    repo.store.put("config", json.dumps({**config, "version": 4}).encode())
    with pytest.raises(RepositoryError, match="format 4; this diskferry reads format 3 only"):
        Repository.open(repo_url, PASSWORD)


def test_tracker_round_trip_replaces_whole(repo):
    assert repo.load_tracker("vm1") is None
    tracker = Tracker(
        vm="vm1", disks={"root": DiskChain(checkpoints=[Checkpoint(name="c1", snapshot="s1")])}
    )
    repo.save_tracker(tracker)
    tracker.disks["root"].checkpoints.append(Checkpoint(name="c2", snapshot="s2"))
    tracker.disks["root"].incrementals_since_full = 1
    repo.save_tracker(tracker)
    loaded = repo.load_tracker("vm1")
    assert loaded == tracker
    assert loaded.disks["root"].last.name == "c2"


def _added_until_stalled(added: list[int], adder: threading.Thread) -> int:
    """How many chunks the adder got in before it stopped getting more in."""
    seen, quiet = -1, 0
    while quiet < 10 and adder.is_alive():
        quiet = quiet + 1 if len(added) == seen else 0
        seen = len(added)
        time.sleep(0.1)
    return len(added)


def test_the_writer_holds_no_more_chunks_than_its_memory(dir_url, new_repo):
    repo = new_repo(dir_url)
    uploads = threading.Event()
    put_parts = repo.store.put_parts

    def slow_put_parts(path, parts):
        if path.startswith("packs/"):
            uploads.wait()
        return put_parts(path, parts)

    repo.store.put_parts = slow_put_parts
    data = [os.urandom(256 * 1024) for _ in range(24)]
    added = []
    writer = repo.pack_writer(memory=2 << 20, pack_size=1 << 20, workers=2, uploads=2)
    with writer:

        def add_all():
            for chunk in data:
                writer.add(chunk)
                added.append(1)

        adder = threading.Thread(target=add_all)
        adder.start()
        stalled = _added_until_stalled(added, adder)
        uploads.set()
        adder.join()
    assert stalled >= 4 and stalled * 256 * 1024 <= 2 << 20  # some went in, then it waited
    assert len(added) == len(data)
    more = chunks(12, size=300_000)
    with repo.pack_writer(memory=1, pack_size=1 << 20) as small:  # one chunk at a time
        ids = [small.add(chunk) for chunk in more]
    assert [repo.read_chunk(i) for i in ids] == more


ONE_CPU_WRITER = """
import os, sys, threading
from diskferry.backup.repository import Repository
with Repository.open(sys.argv[1], "correct horse") as repo, repo.pack_writer() as writer:
    adders = [
        threading.Thread(target=lambda: [writer.add(os.urandom(100_000)) for _ in range(20)])
        for _ in range(4)
    ]
    for t in adders:
        t.start()
    for t in adders:
        t.join()
    print(sum(t.name.startswith("pack-encode") for t in threading.enumerate()))
"""


def test_the_writer_seals_on_the_cpus_the_process_may_use(dir_url, new_repo):
    new_repo(dir_url)
    out = subprocess.run(
        [sys.executable, "-c", ONE_CPU_WRITER, dir_url],
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1"


def test_a_batch_of_chunks_is_looked_up_in_one_query_and_each_stored_once(repo_url, new_repo):
    repo = new_repo(repo_url)
    old = chunks(3, seed=1)
    write(repo, old)
    new = chunks(4, seed=50)
    asked = []
    known = repo.index.known
    repo.index.known = lambda ids: asked.append(list(ids)) or known(ids)
    with repo.pack_writer(pack_size=100_000) as writer:
        batch = [old[0], new[0], new[1], new[0], old[2], new[2]]
        ids = writer.add_many(batch)
    assert len(asked) == 1 and len(asked[0]) == 6
    assert ids == [repo.codec.chunk_id(c) for c in batch]
    assert writer.stats.chunks_new == 3  # new[0] once, the old ones not again
    assert all(repo.index.has(i) for i in ids)
