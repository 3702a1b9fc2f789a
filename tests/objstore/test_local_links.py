"""A directory store that others can write: it never follows a symbolic link nor opens a device or
a FIFO, and keeps its files 0600 in folders 0700 whatever the umask."""

import os
import stat

import pytest

from diskferry.objstore.errors import ForeignEntryError, ObjectNotFoundError
from diskferry.objstore.store import ObjectStore

# a limit on whole reads past any object these tests write
WHOLE = 64 << 20


@pytest.fixture
def victims(tmp_path):
    """A folder of files outside the store, and a way to see that nothing touched it."""
    folder = tmp_path / "victims"
    (folder / "ab").mkdir(parents=True)
    (folder / "precious").write_bytes(b"owned by someone else")
    (folder / "ab" / ("ab" * 16)).write_bytes(b"shaped like a pack")
    before = _tree(folder)
    yield folder
    assert _tree(folder) == before


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _store(tmp_path):
    store = ObjectStore(str(tmp_path / "store"))
    store.put("packs/ab/kept", b"an object")
    return store


@pytest.mark.parametrize("link", ["packs", "packs/ab", "index"])
def test_a_linked_folder_is_refused_by_every_call_and_never_followed(tmp_path, victims, link):
    store = _store(tmp_path)
    root = tmp_path / "store"
    target = victims / "ab" if link == "packs/ab" else victims
    if (root / link).exists():
        os.rename(root / link, tmp_path / "moved-away")
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, root / link)
    inside = f"{link}/{'ab' * 16}" if link == "packs/ab" else f"{link}/ab/{'ab' * 16}"
    calls = {
        "list": lambda: list(store.list(link.split("/")[0])),
        "list all": lambda: list(store.list()),
        "get": lambda: store.get(inside, limit=WHOLE),
        "get_range": lambda: store.get_range(inside, 0, 4),
        "head": lambda: store.head(inside),
        "delete": lambda: store.delete(inside),
        "put": lambda: store.put(f"{link}/ab/new", b"x"),
        "put_new": lambda: store.put_new(f"{link}/ab/new", b"x"),
        "replace": lambda: store.replace(inside, b"x"),
    }
    for what, call in calls.items():
        with pytest.raises(ForeignEntryError, match=f"{link} is a symbolic link") as refused:
            call()
        assert str(target) in str(refused.value), what
    assert os.path.islink(root / link)


def test_a_linked_object_is_refused_and_never_followed(tmp_path, victims):
    store = _store(tmp_path)
    link = tmp_path / "store" / "packs" / "ab" / "linked"
    os.symlink(victims / "precious", link)
    for call in (
        lambda: store.get("packs/ab/linked", limit=WHOLE),
        lambda: store.get_range("packs/ab/linked", 0, 4),
        lambda: store.head("packs/ab/linked"),
        lambda: store.delete("packs/ab/linked"),
        lambda: store.replace("packs/ab/linked", b"overwritten"),
        lambda: list(store.list("packs")),
    ):
        with pytest.raises(ForeignEntryError, match="packs/ab/linked is a symbolic link"):
            call()
    assert os.path.islink(link)


def test_a_fifo_or_a_device_is_no_object(tmp_path):
    store = _store(tmp_path)
    os.mkfifo(tmp_path / "store" / "packs" / "ab" / "fifo")
    for call in (
        # would wait for a writer forever if opened plainly
        lambda: store.get("packs/ab/fifo", limit=WHOLE),
        lambda: store.head("packs/ab/fifo"),
        lambda: list(store.list("packs")),
    ):
        with pytest.raises(ForeignEntryError, match="packs/ab/fifo is not a regular file"):
            call()


def test_a_listing_hands_each_link_and_fifo_to_its_foreign_and_goes_on(tmp_path, victims):
    store = _store(tmp_path)
    root = tmp_path / "store"
    os.symlink(victims / "precious", root / "packs" / "ab" / "linked")
    os.mkfifo(root / "packs" / "ab" / "fifo")
    os.symlink(victims, root / "packs" / "cd")
    store.put("packs/ef/also", b"another object")
    found = []
    listed = [info.path for info in store.list("packs", foreign=found.append)]
    assert sorted(listed) == ["packs/ab/kept", "packs/ef/also"]
    assert sorted(e.path for e in found) == ["packs/ab/fifo", "packs/ab/linked", "packs/cd"]
    assert all(isinstance(e, ForeignEntryError) for e in found)
    whole = []
    os.symlink(victims, root / "index")
    assert list(store.list("index", foreign=whole.append)) == []
    assert [e.path for e in whole] == ["index"] and "is a symbolic link" in whole[0].message


def test_a_file_where_a_folder_should_be_holds_no_object(tmp_path):
    store = _store(tmp_path)
    (tmp_path / "store" / "index").write_bytes(b"a file")
    with pytest.raises(ObjectNotFoundError):
        store.get("index/x", limit=WHOLE)
    assert store.head("index/x") is None
    assert list(store.list("index")) == []


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_objects_are_0600_in_folders_0700_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        store = ObjectStore(str(tmp_path / "new" / "store"))
        store.put("config", b"c")
        store.put_parts("packs/ab/one", [b"a", b"b"])
        store.put_new("locks/l", b"lock")
        store.replace("locks/l", b"renewed")
    finally:
        os.umask(old)
    root = tmp_path / "new" / "store"
    modes = {
        os.path.relpath(os.path.join(where, name), root): stat.S_IMODE(
            os.lstat(os.path.join(where, name)).st_mode
        )
        for where, folders, names in os.walk(root)
        for name in folders + names
    }
    assert modes == {
        "config": 0o600,
        "packs": 0o700,
        "packs/ab": 0o700,
        "packs/ab/one": 0o600,
        "locks": 0o700,
        "locks/l": 0o600,
    }
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700


def test_emptiness_counts_every_entry_but_lost_and_found(tmp_path):
    root = tmp_path / "store"
    root.mkdir()
    (root / "lost+found").mkdir()
    assert ObjectStore(str(root)).empty()
    (root / ".hidden").write_bytes(b"")
    assert not ObjectStore(str(root)).empty()
