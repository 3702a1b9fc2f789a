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

from diskferry.backup.bounds import MAX_LOCK
from diskferry.backup.errors import LockedError, LockLostError
from diskferry.backup.names import listing
from diskferry.base import procstat
from diskferry.base.errors import CancelledError
from diskferry.objstore.errors import ObjectNotFoundError, ObjectStoreError, ObjectTooLargeError
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
    stat = procstat.read(pid)
    if stat is None:
        return None
    return f"{procstat.boot_id()}:{stat.start_time}"


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
    """A lock held in a repository, renewed by a background thread until released.

    The lock is lost when its object is found gone (a renewal never re-creates it) or
    when the last renewal that went through is older than half the lease; from then on
    `check` raises LockLostError, and renewal stops.
    """

    def __init__(
        self,
        store: ObjectStore,
        info: LockInfo,
        *,
        lease: float,
        renew_every: float,
        written: float,
        guard: LockGuard | None = None,
    ) -> None:
        self._store = store
        self.info = info
        self.path = f"locks/{info.id}"
        self._lease = lease
        self._renew_every = renew_every
        self._renewed = written
        self._failure = ""
        self._lost: str | None = None
        self._guard = guard
        self._stop = threading.Event()
        if guard is not None:
            guard.hold(self)
        self._thread = threading.Thread(target=self._renew, name="lock-renew", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self._renew_every) and not self.lost:
            started = time.monotonic()
            renewed = self.info.model_copy(update={"expires": time.time() + self._lease})
            try:
                kept = self._store.replace(self.path, renewed.model_dump_json().encode())
            except Exception as e:
                self._failure = str(e)  # retried: half the lease leaves room for a few tries
                continue
            if not kept:
                self._lost = (
                    f"its lock object {self.path} is gone (deleted by another process or host, "
                    "as a prune does to an expired lock)"
                )
                return
            self.info, self._renewed = renewed, started

    @property
    def lost(self) -> bool:
        """Whether the lock is lost: gone, or not renewed for half its lease."""
        if self._lost is None and time.monotonic() - self._renewed > self._lease / 2:
            failure = f" (last error: {self._failure})" if self._failure else ""
            self._lost = (
                f"its lease was not renewed for over {self._lease / 2:g} s{failure}, so "
                "another host may take it over"
            )
        return self._lost is not None

    def check(self) -> None:
        """Raise LockLostError once the lock is lost."""
        if self.lost:
            raise LockLostError(
                f"lost the lock on {self._store.url} held for {self.info.describe()}: "
                f"{self._lost}; stopped without writing more to the repository"
            )

    def release(self) -> None:
        """Stop renewing and remove the lock object (left to expire if a lost lock cannot be)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        if self._guard is not None:
            self._guard.drop(self)
        try:
            self._store.delete(self.path)
        except ObjectStoreError:
            if not self.lost:
                raise

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class LockGuard:
    """The locks an open repository holds: `check` raises LockLostError once one is lost."""

    def __init__(self) -> None:
        self._held: tuple[Lock, ...] = ()
        self._mutex = threading.Lock()

    def hold(self, lock: Lock) -> None:
        """Watch `lock` until it is dropped."""
        with self._mutex:
            self._held = (*self._held, lock)

    def drop(self, lock: Lock) -> None:
        """Stop watching `lock`."""
        with self._mutex:
            self._held = tuple(held for held in self._held if held is not lock)

    def check(self) -> None:
        """Raise LockLostError if any lock held is lost."""
        for lock in self._held:
            lock.check()


def acquire(
    store: ObjectStore,
    kind: LockKind,
    purpose: str,
    *,
    vm: str | None = None,
    wait: float = 0.0,
    notify: Callable[[str], None] = lambda message: None,
    cancel: threading.Event | None = None,
    lease: float = LEASE_SECONDS,
    renew_every: float | None = None,
    guard: LockGuard | None = None,
) -> Lock:
    """Take a lock (stale ones are taken over); wait up to `wait` seconds, else LockedError.

    A set `cancel` ends the wait with CancelledError. The lock is renewed every
    `renew_every` seconds (a fifth of the lease by default) and, with a `guard`, watched by it.
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
    pause = cancel or threading.Event()
    told = False
    while True:
        written = time.monotonic()
        info.expires = time.time() + lease
        store.put(path, info.model_dump_json().encode())
        try:
            blockers = _blockers(store, info, notify)
            if not blockers:
                return Lock(
                    store,
                    info,
                    lease=lease,
                    renew_every=renew_every or lease / 5,
                    written=written,
                    guard=guard,
                )
        except BaseException:
            store.delete(path)
            raise
        store.delete(path)
        if time.monotonic() >= deadline:
            hint = "wait for it to finish, or retry with --wait"
            raise LockedError(f"{store.url} is locked by {blockers[0].describe()}: {hint}")
        if not told:
            notify(f"waiting: {store.url} is locked by {blockers[0].describe()}")
            told = True
        if pause.wait(min(random.uniform(0.5, 2.0), max(0.05, deadline - time.monotonic()))):
            raise CancelledError(f"cancelled while waiting for the lock on {store.url}")


def _blockers(store: ObjectStore, mine: LockInfo, notify: Callable[[str], None]) -> list[LockInfo]:
    found = []
    now = time.time()
    for obj in listing(store, "locks"):
        if obj.path == f"locks/{mine.id}":
            continue
        try:
            other = LockInfo.model_validate_json(store.get(obj.path, limit=MAX_LOCK))
        except (ObjectNotFoundError, ObjectTooLargeError, ValidationError):
            continue  # gone, or no lock diskferry writes: it holds nothing
        if not mine.conflicts(other):
            continue
        reason = stale_reason(other, now)
        if reason is None:
            found.append(other)
            continue
        store.delete(obj.path)
        notify(f"took over the lock of {other.describe()}: {reason}")
    return found
