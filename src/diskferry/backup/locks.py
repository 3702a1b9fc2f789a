"""Locks `locks/<id>`: leases naming their holder, renewed while held, taken over when stale."""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ValidationError

from diskferry.backup.errors import LockedError
from diskferry.disk.errors import CancelledError
from diskferry.objstore.errors import ObjectNotFoundError
from diskferry.objstore.store import ObjectStore

LEASE_SECONDS = 300.0
LockKind = Literal["shared", "exclusive", "vm"]


class LockInfo(BaseModel):
    """What a lock object says: its kind, who holds it and until when."""

    id: str
    kind: LockKind
    vm: str | None = None
    purpose: str
    host: str
    pid: int
    start: str
    created: float
    expires: float

    def conflicts(self, other: LockInfo) -> bool:
        """Whether the two locks cannot be held at once."""
        if self.kind == "vm" or other.kind == "vm":
            return self.kind == other.kind and self.vm == other.vm
        return "exclusive" in (self.kind, other.kind)

    def describe(self) -> str:
        """Who holds the lock, for messages."""
        since = datetime.fromtimestamp(self.created, UTC).isoformat(timespec="seconds")
        what = f"{self.purpose} of VM {self.vm}" if self.vm else self.purpose
        return f"{what} (pid {self.pid} on {self.host}, since {since})"


def process_start(pid: int) -> str | None:
    """The boot id and start time of a process on this host, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except (OSError, IndexError):
        return None
    return f"{boot}:{fields[19]}"


def stale_reason(info: LockInfo, now: float) -> str | None:
    """Why a lock may be taken over, or None when its holder may still be at work."""
    if info.host == socket.gethostname():
        if process_start(info.pid) != info.start:
            return f"its holder, pid {info.pid} on this host, is gone"
        return None
    if info.expires < now:
        return f"its lease from {info.host} ran out"
    return None


class Lock:
    """A lock held in a repository; renewed by a background thread until released."""

    def __init__(self, store: ObjectStore, info: LockInfo, renew_every: float) -> None:
        self._store = store
        self.info = info
        self.path = f"locks/{info.id}"
        self._stop = threading.Event()
        self._renew_every = renew_every
        self._thread = threading.Thread(target=self._renew, name="lock-renew", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self._renew_every):
            self.info.expires = time.time() + LEASE_SECONDS
            try:
                self._store.put(self.path, self.info.model_dump_json().encode())
            except Exception:
                continue  # a missed renewal is retried; the lease outlasts several

    def release(self) -> None:
        """Stop renewing and remove the lock object."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._store.delete(self.path)

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(
    store: ObjectStore,
    kind: LockKind,
    purpose: str,
    *,
    vm: str | None = None,
    wait: float = 0.0,
    notify: Callable[[str], None] = lambda message: None,
    renew_every: float = LEASE_SECONDS / 5,
    cancel: threading.Event | None = None,
) -> Lock:
    """Take a lock (stale ones are taken over); wait up to `wait` seconds, else LockedError.

    Setting `cancel` ends a wait with CancelledError.
    """
    pid = os.getpid()
    info = LockInfo(
        id=os.urandom(12).hex(),
        kind=kind,
        vm=vm,
        purpose=purpose,
        host=socket.gethostname(),
        pid=pid,
        start=process_start(pid) or "",
        created=time.time(),
        expires=0.0,
    )
    path = f"locks/{info.id}"
    deadline = time.monotonic() + wait
    told = False
    while True:
        info.expires = time.time() + LEASE_SECONDS
        store.put(path, info.model_dump_json().encode())
        blockers = _blockers(store, info, notify)
        if not blockers:
            return Lock(store, info, renew_every)
        store.delete(path)
        if time.monotonic() >= deadline:
            hint = "wait for it to finish, or retry with --wait"
            raise LockedError(f"{store.url} is locked by {blockers[0].describe()}: {hint}")
        if not told:
            notify(f"waiting: {store.url} is locked by {blockers[0].describe()}")
            told = True
        pause = min(random.uniform(0.5, 2.0), max(0.05, deadline - time.monotonic()))
        if cancel is None:
            time.sleep(pause)
        elif cancel.wait(pause):
            raise CancelledError("cancelled while waiting for a lock")


def _blockers(store: ObjectStore, mine: LockInfo, notify: Callable[[str], None]) -> list[LockInfo]:
    found = []
    now = time.time()
    for obj in store.list("locks/"):
        if obj.path == f"locks/{mine.id}":
            continue
        try:
            other = LockInfo.model_validate_json(store.get(obj.path))
        except (ObjectNotFoundError, ValidationError):
            continue
        if not mine.conflicts(other):
            continue
        reason = stale_reason(other, now)
        if reason is None:
            found.append(other)
            continue
        store.delete(obj.path)
        notify(f"took over the lock of {other.describe()}: {reason}")
    return found
