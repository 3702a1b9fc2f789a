"""Locks: shared and exclusive, per VM, renewal, take-over of dead or expired holders, waiting,
cancelling a wait, and a lock lost to failing renewals or to another host."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from backup_support import PASSWORD

from diskferry.backup.bounds import MAX_CONFIG, MAX_LOCK
from diskferry.backup.errors import LockedError, LockLostError
from diskferry.backup.locks import LockInfo, acquire
from diskferry.backup.repository import Repository
from diskferry.base.errors import CancelledError
from diskferry.objstore.store import ObjectStore

HOLDER = """
import sys, time
from diskferry.backup.locks import acquire
from diskferry.objstore.store import ObjectStore
acquire(ObjectStore(sys.argv[1]), "exclusive", "prune")
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture
def store(repo_url):
    return ObjectStore(repo_url)


def test_shared_locks_coexist_and_exclusive_is_refused(store):
    holder = rf"locked by (backup|restore) \(pid {os.getpid()} on "
    with (
        acquire(store, "shared", "backup"),
        acquire(store, "shared", "restore"),
        pytest.raises(LockedError, match=holder),
    ):
        acquire(store, "exclusive", "prune")
    with acquire(store, "exclusive", "prune"), pytest.raises(LockedError, match="locked by prune"):
        acquire(store, "shared", "check")
    assert list(store.list("locks/")) == []


def test_one_backup_per_vm(store):
    with acquire(store, "vm", "backup", vm="vm1"):
        with pytest.raises(LockedError, match="backup of VM vm1"):
            acquire(store, "vm", "backup", vm="vm1")
        acquire(store, "vm", "backup", vm="vm2").release()
        acquire(store, "exclusive", "prune").release()


def test_dead_holder_on_this_host_is_taken_over(store):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(LockedError, match=f"pid {proc.pid}"):
            acquire(store, "shared", "backup")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    notes = []
    with acquire(store, "shared", "backup", notify=notes.append):
        pass
    assert len(notes) == 1
    assert f"pid {proc.pid}" in notes[0] and "is gone" in notes[0]


def foreign_lock(store, expires):
    info = LockInfo(
        id="f" * 24,
        kind="exclusive",
        purpose="prune",
        host="another-host.example",
        pid=1,
        start="x",
        created=time.time() - 1000,
        expires=expires,
    )
    store.put(f"locks/{info.id}", info.model_dump_json().encode())


def test_lock_from_another_host_waits_for_its_lease(store):
    foreign_lock(store, time.time() + 120)
    with pytest.raises(LockedError, match=r"another-host\.example"):
        acquire(store, "shared", "backup")
    foreign_lock(store, time.time() - 1)
    notes = []
    with acquire(store, "shared", "backup", notify=notes.append):
        assert not store.exists("locks/" + "f" * 24)
    assert "lease from another-host.example ran out" in notes[0]


def test_wait_for_a_conflicting_lock(store):
    held = acquire(store, "exclusive", "prune")
    threading.Timer(1.0, held.release).start()
    with acquire(store, "shared", "backup", wait=30):
        assert not store.exists(held.path)


def test_lease_is_renewed_while_held(store):
    lock = acquire(store, "shared", "backup", renew_every=0.05)
    first = json.loads(store.get(lock.path, limit=MAX_LOCK))["expires"]
    deadline = time.monotonic() + 10
    while json.loads(store.get(lock.path, limit=MAX_LOCK))["expires"] == first:
        assert time.monotonic() < deadline, "the lock was not renewed"
        time.sleep(0.05)
    lock.release()
    assert not store.exists(lock.path)


def test_a_cancelled_wait_ends_and_leaves_no_lock_of_its_own(repo):
    held = acquire(repo.store, "exclusive", "prune")
    cancel, waiting = threading.Event(), threading.Event()
    raised: list[BaseException] = []

    def wait_for_the_lock():
        try:
            repo.lock("shared", "backup", wait=600, cancel=cancel, notify=lambda _: waiting.set())
        except BaseException as e:
            raised.append(e)

    waiter = threading.Thread(target=wait_for_the_lock)
    waiter.start()
    assert waiting.wait(30)
    cancel.set()
    waiter.join(30)
    assert not waiter.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], CancelledError), raised
    assert repo.url in raised[0].message
    assert [o.path for o in repo.store.list("locks/")] == [held.path]
    held.release()


def wait_until_lost(lock):
    deadline = time.monotonic() + 30
    while not lock.lost:
        assert time.monotonic() < deadline, "the lock was never marked lost"
        time.sleep(0.02)


@contextlib.contextmanager
def read_only(folder):
    """`folder` mounted read-only over itself, so every write into it fails with EROFS."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_lock_whose_renewals_keep_failing_is_lost(dir_url, new_repo):
    new_repo(dir_url)
    other = ObjectStore(dir_url)
    with Repository.open(dir_url, PASSWORD, lease=2.0) as repo:
        lock = repo.lock("shared", "backup")
        with read_only(os.path.join(dir_url, "locks")):
            last_written = other.get(lock.path, limit=MAX_LOCK)
            wait_until_lost(lock)
            assert other.get(lock.path, limit=MAX_LOCK) == last_written
            with pytest.raises(LockLostError) as lost:
                repo.store.put("snapshots/vm/d/x", b"written after the loss")
            with pytest.raises(LockLostError):
                repo.store.get("config", limit=MAX_CONFIG)
        assert lost.value.reason == "LockLost"
        assert dir_url in lost.value.message and "backup" in lost.value.message
        assert "not renewed" in lost.value.message and "Read-only file system" in lost.value.message
        assert not other.exists("snapshots/vm/d/x")
        lock.release()
    assert list(other.list("locks/")) == []


def test_a_lock_deleted_by_another_host_is_not_put_back(repo_url, new_repo):
    new_repo(repo_url)
    other = ObjectStore(repo_url)
    with Repository.open(repo_url, PASSWORD, lease=4.0) as repo:
        lock = repo.lock("shared", "backup")
        held = repo.lock("vm", "backup", vm="vm1")
        other.delete(lock.path)  # as a prune on another host does to a lease it saw expire
        wait_until_lost(lock)
        assert not other.exists(lock.path)
        assert not held.lost
        with pytest.raises(LockLostError, match="is gone") as lost:
            repo.store.put("trackers/vm1", b"written after the loss")
        assert repo_url in lost.value.message
        assert not other.exists("trackers/vm1")
        lock.release()
        repo.store.put("trackers/vm1", b"the remaining lock still holds")
        held.release()
    assert list(other.list("locks/")) == []
