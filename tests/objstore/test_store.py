"""ObjectStore against a directory and a real S3 server."""

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from s3server import make_bucket, running_moto, use_endpoint

from diskferry.objstore import local
from diskferry.objstore.errors import (
    BucketNotFoundError,
    CredentialsRefusedError,
    ObjectNotFoundError,
    ObjectStoreError,
)
from diskferry.objstore.store import ObjectStore, S3Options

# a limit on whole reads past any object these tests write
WHOLE = 64 << 20


def test_put_get_range_head_list_delete(store_url):
    store = ObjectStore(store_url)
    store.put("a/b/one", b"hello world")
    store.put("a/two", bytearray(b"x" * 1000))
    store.put("c/three", b"")
    assert store.get("a/b/one", limit=WHOLE) == b"hello world"
    assert store.get_range("a/b/one", 6, 5) == b"world"
    assert store.get_start("a/b/one", 5) == b"hello"
    assert store.get_start("a/b/one", 1000) == b"hello world"
    info = store.head("a/two")
    assert info is not None and info.size == 1000 and info.path == "a/two"
    assert store.exists("c/three") and not store.exists("c/nothing")
    assert sorted(o.path for o in store.list("a")) == ["a/b/one", "a/two"]
    assert sorted(o.path for o in store.list("a/")) == ["a/b/one", "a/two"]
    assert sorted(o.path for o in store.list()) == ["a/b/one", "a/two", "c/three"]
    store.put("a/two", b"new")
    assert store.get("a/two", limit=WHOLE) == b"new"
    store.delete("a/two")
    store.delete("a/two")
    assert not store.exists("a/two")
    assert [o.path for o in store.list("a")] == ["a/b/one"]


def test_missing_object_is_typed(store_url):
    store = ObjectStore(store_url)
    with pytest.raises(ObjectNotFoundError, match="nothing/here does not exist"):
        store.get("nothing/here", limit=WHOLE)
    with pytest.raises(ObjectNotFoundError):
        store.get_range("nothing/here", 0, 4)
    assert store.head("nothing/here") is None


def test_short_range_is_an_error(store_url):
    store = ObjectStore(store_url)
    store.put("small", b"abc")
    with pytest.raises(ObjectStoreError):
        store.get_range("small", 1, 10)


def test_put_new_only_once(store_url):
    store = ObjectStore(store_url)
    assert store.put_new("lock", b"first")
    assert not store.put_new("lock", b"second")
    assert store.get("lock", limit=WHOLE) == b"first"


def test_put_new_has_one_winner_among_racing_writers(store_url):
    store = ObjectStore(store_url)
    start = threading.Barrier(8)

    def race(writer):
        start.wait()
        return [store.put_new(f"race/{n}", f"writer {writer}".encode()) for n in range(20)]

    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(race, range(8)))
    for n in range(20):
        winners = [w for w in range(8) if wins[w][n]]
        assert len(winners) == 1
        assert store.get(f"race/{n}", limit=WHOLE) == f"writer {winners[0]}".encode()


def test_replace_writes_only_over_an_existing_object(store_url):
    store = ObjectStore(store_url)
    assert not store.replace("locks/gone", b"renewed")
    assert not store.exists("locks/gone")
    store.put("locks/here", b"first")
    assert store.replace("locks/here", b"renewed")
    assert store.get("locks/here", limit=WHOLE) == b"renewed"
    assert [o.path for o in store.list("locks")] == ["locks/here"]


def test_replace_where_names_cannot_be_exchanged(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_renameat2", lambda: None)
    store = ObjectStore(str(tmp_path))
    assert not store.replace("gone", b"x") and not store.exists("gone")
    store.put("here", b"first")
    assert store.replace("here", b"renewed") and store.get("here", limit=WHOLE) == b"renewed"
    assert os.listdir(tmp_path) == ["here"]


def test_a_killed_writers_temporary_files_are_never_objects(tmp_path):
    store = ObjectStore(str(tmp_path))
    store.put("packs/ab/kept", b"data")
    folder = tmp_path / "packs" / "ab"
    abandoned = folder / ".lost.0123456789ab.tmp"
    abandoned.write_bytes(b"half a pack")
    old = time.time() - local.ABANDONED_AFTER - 60
    os.utime(abandoned, (old, old))
    in_flight = folder / ".busy.0123456789ab.tmp"
    in_flight.write_bytes(b"being written")
    assert [o.path for o in store.list("packs/")] == ["packs/ab/kept"]
    assert sorted(os.listdir(folder)) == [".busy.0123456789ab.tmp", "kept"]
    with pytest.raises(ObjectStoreError, match="not an object path"):
        store.put("packs/ab/.busy.0123456789ab.tmp", b"x")


def test_a_name_as_long_as_the_filesystem_allows(store_url):
    store = ObjectStore(store_url)
    name = "trackers/" + "v" * 250
    store.put(name, b"tracked")
    assert store.get(name, limit=WHOLE) == b"tracked"
    assert [o.path for o in store.list("trackers")] == [name]


def test_listing_an_empty_folder(store_url):
    assert list(ObjectStore(store_url).list("packs")) == []


def test_directory_put_leaves_no_partial_file(tmp_path):
    store = ObjectStore(str(tmp_path))
    store.put("x/y", b"z" * 100_000)
    assert os.listdir(tmp_path / "x") == ["y"]


def test_missing_bucket_is_typed(s3_endpoint, monkeypatch):
    use_endpoint(monkeypatch, s3_endpoint)
    store = ObjectStore("s3://no-such-bucket/prefix")
    with pytest.raises(BucketNotFoundError, match="no-such-bucket"):
        store.get("config", limit=WHOLE)
    with pytest.raises(BucketNotFoundError):
        list(store.list("snapshots"))
    with pytest.raises(BucketNotFoundError):
        store.put("config", b"x")


def test_explicit_options_override_the_environment(s3_endpoint, monkeypatch):
    use_endpoint(monkeypatch, "http://127.0.0.1:1")
    store = ObjectStore("s3://diskferry-test/explicit", S3Options(endpoint=s3_endpoint))
    store.put("k", b"v")
    assert store.get("k", limit=WHOLE) == b"v"


def test_an_endpoint_behind_a_private_ca_is_reached_with_that_ca(tls, monkeypatch):
    with running_moto(tls=tls) as endpoint:
        make_bucket(endpoint, "private", tls.ca)
        use_endpoint(monkeypatch, endpoint)
        untrusted = ObjectStore("s3://private/p")
        with pytest.raises(ObjectStoreError, match="certificate"):
            untrusted.put("k", b"v")
        trusted = ObjectStore("s3://private/p", S3Options(ca_bundle=tls.ca.read_bytes()))
        trusted.put("k", b"v")
        assert trusted.get("k", limit=WHOLE) == b"v"


def test_a_ca_bundle_that_holds_no_certificate_is_typed():
    with pytest.raises(ObjectStoreError, match="no PEM certificate") as info:
        ObjectStore("s3://b/p", S3Options(endpoint="https://127.0.0.1:1", ca_bundle=b"junk"))
    assert info.value.reason == "BadCaBundle"


def test_refused_credentials_are_typed(monkeypatch):
    with running_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as endpoint:
        use_endpoint(monkeypatch, endpoint)
        store = ObjectStore("s3://any-bucket/p")
        with pytest.raises(CredentialsRefusedError) as info:
            store.get("config", limit=WHOLE)
        assert "testing-secret" not in str(info.value)


def test_unknown_scheme_is_refused():
    with pytest.raises(ObjectStoreError, match="s3://bucket/prefix"):
        ObjectStore("ftp://host/x")


def test_a_missing_directory_is_made_only_when_asked(tmp_path):
    with pytest.raises(ObjectNotFoundError):
        ObjectStore(str(tmp_path / "typo"), create=False)
    assert not (tmp_path / "typo").exists()
    ObjectStore(str(tmp_path / "new")).put("k", b"v")
    assert (tmp_path / "new" / "k").read_bytes() == b"v"


def test_readers_never_see_a_partial_object(store_url):
    store = ObjectStore(store_url)
    versions = [bytes([n]) * (2 << 20) for n in (1, 2)]
    store.put("obj", versions[0])
    stop = threading.Event()
    seen = []

    def read():
        while not stop.is_set():
            seen.append(store.get("obj", limit=WHOLE))

    reader = threading.Thread(target=read)
    reader.start()
    for n in range(10):
        store.put("obj", versions[n % 2])
    stop.set()
    reader.join()
    assert seen and all(data in versions for data in seen)


def test_a_file_goes_up_whole_and_unseen_until_done(store_url, tmp_path):
    store = ObjectStore(store_url)
    old = b"\1" * 1000
    store.put("obj", old)
    new = os.urandom(20 << 20)  # several parts
    source = tmp_path / "spool"
    source.write_bytes(new)
    stop = threading.Event()
    seen = []

    def watch():
        while not stop.is_set():
            info = store.head("obj")
            seen.append((info.size if info else None, [o.path for o in store.list()]))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with open(source, "rb") as f:
            store.put_file("obj", f)
    finally:
        stop.set()
        watcher.join()
    assert store.get("obj", limit=WHOLE) == new
    assert seen and all(size in (len(old), len(new)) and names == ["obj"] for size, names in seen)


def test_parts_are_stored_as_one_object_in_their_order(store_url):
    store = ObjectStore(store_url)
    parts = [bytes([n % 251]) * (n % 7) for n in range(1500)] + [memoryview(b"tail")]
    store.put_parts("packs/parted", parts)
    assert store.get("packs/parted", limit=WHOLE) == b"".join(parts)


def test_parts_written_a_few_bytes_at_a_time_still_land_whole(tmp_path, monkeypatch):
    writev = os.writev
    monkeypatch.setattr(local.os, "writev", lambda fd, views: writev(fd, [bytes(views[0][:3])]))
    store = ObjectStore(str(tmp_path / "store"))
    parts = [b"abcdefg", b"", b"hi", bytearray(b"jklmnopq")]
    store.put_parts("object", parts)
    assert store.get("object", limit=WHOLE) == b"abcdefghijklmnopq"
