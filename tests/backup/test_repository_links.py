"""A repository on storage others can write: a symbolic link anywhere in it, or a name it never
writes, is refused by backup, forget and prune, and nothing behind it is read or deleted; check
reports every one of them, with every other problem it finds."""

import os
import re
import shutil

import pytest
from backup_support import PASSWORD, MiB, engine_fixture, files_under  # noqa: F401

from diskferry.backup.check import CheckReport
from diskferry.backup.errors import ForeignObjectError
from diskferry.backup.job import CheckJob, ForgetJob, PruneJob
from diskferry.backup.ops import check_repository, forget_snapshots, prune_repository
from diskferry.disk.progress import Progress
from diskferry.objstore.errors import ForeignEntryError

DISK_SIZE = 4 * MiB


@pytest.fixture
def victims(tmp_path):
    """Files owned elsewhere, some of them shaped like a repository's objects."""
    folder = tmp_path / "victims"
    (folder / "ab").mkdir(parents=True)
    (folder / "precious").write_bytes(b"owned by someone else")
    (folder / "ab" / ("ab" * 16)).write_bytes(b"shaped like a pack")
    (folder / ("cd" * 16)).write_bytes(b"shaped like an index or a key")
    (folder / "vm" / "d").mkdir(parents=True)
    (folder / "vm" / "d" / "0123456789abcdef").write_bytes(b"shaped like a manifest")
    return folder


@pytest.fixture
def backed_up(engine, tmp_path):
    """The engine's repository with two backups of one small disk; the disk and the snapshots."""
    disk = tmp_path / "disk.raw"
    snapshots = []
    for _ in range(2):
        with open(disk, "wb") as f:
            f.truncate(DISK_SIZE)
            f.write(os.urandom(MiB + 4321))
        snapshots.append(engine.backup(disks={"d": str(disk)}).disks[0].snapshot)
    return engine, str(disk), snapshots


def _one(root, folder):
    return sorted(os.listdir(os.path.join(root, folder)))[0]


def _place(root, where, victims):
    """Put a symbolic link at `where` (a folder or an object of the repository) to the victims."""
    root = str(root)
    path = os.path.join(root, where)
    if os.path.isdir(path):
        shutil.move(path, f"{root}-moved-away-{where.replace('/', '-')}")  # out of the way
        target = victims / "vm" if where.startswith("snapshots/") else victims
    else:
        if os.path.exists(path):
            os.unlink(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        target = victims / "precious"
    os.symlink(target, path)
    return where


PLACES = [
    "config",
    "keys",
    "keys/<key>",
    "locks",
    "locks/" + "0" * 24,
    "index",
    "index/<index>",
    "packs",
    "packs/<aa>",
    "packs/<aa>/<pack>",
    "snapshots",
    "snapshots/vm",
    "snapshots/vm/d",
    "snapshots/vm/d/<first>",
    "trackers",
    "trackers/vm",
]


def _resolve(place, root, snapshots):
    aa = _one(root, "packs")
    names = {
        "<key>": _one(root, "keys"),
        "<index>": _one(root, "index"),
        "<aa>": aa,
        "<pack>": _one(root, f"packs/{aa}"),
        "<first>": snapshots[0],
    }
    return re.sub(r"<\w+>", lambda m: names[m[0]], place)


@pytest.mark.parametrize("place", PLACES)
def test_a_link_anywhere_is_refused_and_nothing_behind_it_is_touched(backed_up, victims, place):
    engine, disk, snapshots = backed_up
    where = _place(engine.url, _resolve(place, engine.url, snapshots), victims)
    before = files_under(victims)
    refused = []
    reported = []
    operations = {
        "backup": lambda: engine.backup(disks={"d": disk}),
        "forget": lambda: forget_snapshots(
            ForgetJob(repo=engine.url, snapshots=[snapshots[0]]), Progress()
        ),
        "check": lambda: check_repository(CheckJob(repo=engine.url, read_data=True), Progress()),
        "prune": lambda: prune_repository(PruneJob(repo=engine.url), Progress()),
    }
    for name, operation in operations.items():
        try:
            done = operation()
        except ForeignEntryError as e:
            assert f"{where} is a symbolic link" in e.message, e.message
            refused.append(name)
        else:
            if isinstance(done, CheckReport):
                links = [p for p in done.problems if f"{where} is a symbolic link" in p.message]
                assert not done.ok and [p.object for p in links] == [where], done.problems
                reported.append(name)
        assert files_under(victims) == before, f"{name} touched the victims through {where}"
        assert os.path.islink(os.path.join(engine.url, where))
    assert "check" in refused + reported  # check looks at every object


def test_a_prune_deletes_nothing_behind_a_linked_packs_folder(
    dir_url, new_repo, victims, monkeypatch
):
    new_repo(dir_url)  # no backup yet: no pack is missing, every file there would be a stray
    monkeypatch.setenv("DISKFERRY_PASSWORD", PASSWORD)
    os.symlink(victims, os.path.join(dir_url, "packs"))
    before = files_under(victims)
    with pytest.raises(ForeignEntryError, match="packs is a symbolic link"):
        prune_repository(PruneJob(repo=dir_url), Progress())
    assert files_under(victims) == before


@pytest.mark.parametrize(
    "name",
    ["packs/ab/notes.txt", "packs/ab/" + "cd" * 16, "packs/" + "ab" * 16, "index/" + "x" * 32],
)
def test_prune_deletes_no_name_the_repository_never_writes(backed_up, name):
    engine, _, snapshots = backed_up
    forget_snapshots(ForgetJob(repo=engine.url, snapshots=[snapshots[0]]), Progress())
    path = os.path.join(engine.url, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"someone else's file")
    with pytest.raises(ForeignObjectError, match=re.escape(name)):
        prune_repository(PruneJob(repo=engine.url), Progress())
    report = check_repository(CheckJob(repo=engine.url), Progress())
    assert [p.object for p in report.problems] == [name]
    assert "is not an object this repository writes" in report.problems[0].message
    with open(path, "rb") as f:
        assert f.read() == b"someone else's file"


def test_check_reports_every_foreign_name_and_link_and_goes_on(backed_up, victims):
    engine, _, snapshots = backed_up
    aa = _one(engine.url, "packs")
    damaged = f"packs/{aa}/{_one(engine.url, f'packs/{aa}')}"
    with open(os.path.join(engine.url, damaged), "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    strays = [
        "keys/stray",
        "index/" + "x" * 32,
        "packs/ab/notes.txt",
        "packs/" + "ab" * 16,
        "snapshots/vm/d/not a snapshot",
        "snapshots/vm/d/deeper/still",
        "trackers/vm.json~",
        "metadata/a b",
    ]
    for name in strays:
        path = os.path.join(engine.url, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"someone else's file")
    linked = _place(engine.url, "packs/cd/" + "cd" * 16, victims)
    before = files_under(victims)
    report = check_repository(CheckJob(repo=engine.url, read_data=True), Progress())
    assert not report.ok
    found = {p.object: p.message for p in report.problems}
    for name in strays:
        assert "is not an object this repository writes" in found.pop(name), name
    assert f"{linked} is a symbolic link" in found.pop(linked)
    assert "chunks are damaged" in found.pop(damaged)
    assert found == {}
    assert report.snapshots == len(snapshots) and report.affected  # it went on past them all
    assert files_under(victims) == before
    for name in strays:
        assert os.path.exists(os.path.join(engine.url, name))
