"""Locks: shared and exclusive, per VM, renewal, take-over of dead or expired holders, waiting."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from diskferry.backup.errors import LockedError
from diskferry.backup.locks import LockInfo, acquire
from diskferry.disk.errors import CancelledError
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
    first = json.loads(store.get(lock.path))["expires"]
    deadline = time.monotonic() + 10
    while json.loads(store.get(lock.path))["expires"] == first:
        assert time.monotonic() < deadline, "the lock was not renewed"
        time.sleep(0.05)
    lock.release()
    assert not store.exists(lock.path)


def test_a_cancel_ends_a_wait(store):
    cancel = threading.Event()
    with acquire(store, "exclusive", "prune") as held:
        threading.Timer(0.3, cancel.set).start()
        with pytest.raises(CancelledError, match="waiting for a lock"):
            acquire(store, "shared", "backup", wait=float("inf"), cancel=cancel)
        assert [info.path for info in store.list("locks/")] == [held.path]
