"""The manager: feeds reconcilers from a Source's listing and changes, with a resync, and
retries errors.

The source (the embedded store, or a cluster's API) lists the reconciled kinds and follows
their changes. An object queues itself (when its kind has a reconciler) when it is new or
deleted, or its generation, labels, annotations, finalizers or deletionTimestamp changed: a
write of its status alone does not (as controller-runtime's GenerationChangedPredicate has
it), so a reconcile that writes status does not call itself again. Any change of an object
queues each owner its ownerReferences name (when theirs has a reconciler), so that a parent
hears of its children, and each object `related` maps it to, before and after the change (a
VM queues the disks it named and those it names now). The `owned` kinds (in a cluster, the
worker Pods and claims the runner and the volumes make) are followed for that alone, as
controller-runtime's Owns has it: a worker Pod that ends, a claim that is bound, queues the
object that owns it at once, not at the next resync. Every `resync` seconds every object of a
reconciled kind is queued again, and Events older than an hour are deleted where the source
keeps them. Worker threads take keys from one WorkQueue, so no key is reconciled twice at
once; an error is retried with backoff and shown on the object as the condition `Reconciled`
(False, reason ReconcileError) and a Warning Event; the next success sets it True, so every
reconciled kind declares it (the manager refuses a reconciler of a kind that does not).

The manager keeps, of each object of a kind it follows, a digest of what queues it, the owners
its ownerReferences name and what it bears on. When the source lost the changes of some kinds
(KindsGone), it lists those kinds alone again, the others' changes going on; any other
GoneError makes it list every kind again. A listing (as a resync's) queues every object in it,
and an object it kept that the listing no longer has was deleted meanwhile: it, its owners and
what it bore on are queued, as for a deletion seen (as client-go's DeltaFIFO.Replace has it).
`stop` ends the watch, lets the reconciles under way finish, and returns.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.errors import ConflictError, GoneError
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import RECONCILED, Resource
from diskferry.control.runtime.client import Client
from diskferry.control.runtime.conditions import declared, find, set_condition
from diskferry.control.runtime.queue import WorkQueue
from diskferry.control.runtime.reconciler import Reconciler, Result, named
from diskferry.control.runtime.source import KindsGone, Source

log = logging.getLogger("diskferry.control")
RECONCILE_ERROR = "ReconcileError"
RESYNC_SECONDS = 60.0
WATCH_POLL = 0.5
FINGERPRINT = 16
WATCHED = ("uid", "generation", "labels", "annotations", "finalizers", "deletionTimestamp")
Related = Callable[[dict[str, Any]], Iterable[tuple[str, str | None, str]]]
"""What an object (as API values) bears on: the (kind, namespace, name) of objects to queue
whenever it changes."""


@dataclass(frozen=True)
class ObjectKey:
    """What the queue holds: an object's kind, namespace (None when cluster-scoped) and name."""

    kind: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        return named(self.kind, self.namespace, self.name)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectKey:
        """The key of an object (as API values)."""
        meta = obj.get("metadata") or {}
        return cls(obj.get("kind", ""), meta.get("namespace"), meta.get("name", ""))


@dataclass(frozen=True)
class Known:
    """What the manager keeps of an object it follows: the digest of what queues it, the
    owners its ownerReferences name (of reconciled kinds) and what it bears on."""

    fingerprint: bytes
    owners: tuple[ObjectKey, ...]
    bearing: frozenset[tuple[str, str | None, str]]


def fingerprint(obj: dict[str, Any]) -> bytes:
    """What of an object queues it when it changes: its uid, generation, labels, annotations,
    finalizers and deletionTimestamp, as a digest of FINGERPRINT bytes, so that what the
    manager keeps of each object does not grow with them (an annotation may hold the whole
    object, as kubectl apply's last-applied-configuration does)."""
    meta = obj.get("metadata") or {}
    text = json.dumps([meta.get(field) for field in WATCHED], sort_keys=True)
    return hashlib.blake2b(text.encode(), digest_size=FINGERPRINT).digest()


def error_message(error: BaseException) -> str:
    """One line saying what went wrong."""
    if isinstance(error, DiskferryError):
        return error.message
    text = (str(error).splitlines() or [""])[0]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class Manager:
    """Runs `reconcilers` on the objects `source` lists and follows, through `client`."""

    def __init__(
        self,
        source: Source,
        client: Client,
        reconcilers: Sequence[Reconciler],
        *,
        workers: int = 4,
        resync: float = RESYNC_SECONDS,
        related: Mapping[str, Related] | None = None,
        owned: Sequence[KindInfo] = (),
    ) -> None:
        self.source = source
        self.client = client
        for reconciler in reconcilers:
            declared(reconciler.info.model, RECONCILED)
        self.reconcilers = {r.info.kind: r for r in reconcilers}
        self.related = dict(related or {})
        self.owned = list(owned)
        self.queue: WorkQueue[ObjectKey] = WorkQueue()
        self.workers = workers
        self.resync = resync
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._known: dict[ObjectKey, Known] = {}  # the watch thread's own, as is _followed
        self._followed: set[str] = set()  # the kinds whose objects _known keeps

    def start(self) -> None:
        """Start watching and reconciling."""
        self._threads = [threading.Thread(target=self._watch, name="control-watch", daemon=True)]
        self._threads += [
            threading.Thread(target=self._work, name=f"control-worker-{n}", daemon=True)
            for n in range(self.workers)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 60) -> None:
        """Stop watching, let the reconciles under way finish, and return."""
        self._stop.set()
        self.queue.shutdown()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._threads = []

    def enqueue(self, kind: str, namespace: str | None, name: str) -> None:
        """Queue a reconcile of the object, when its kind has a reconciler."""
        if kind in self.reconcilers:
            self.queue.add(ObjectKey(kind, namespace, name))

    def _enqueue_object(self, obj: dict[str, Any], event: str | None = None) -> None:
        """Queue the object's owners and what it bears on (before and after the change), and
        the object itself unless only its status changed since the watch last saw it; `event`
        is the watch's type, None for a listed object, which is queued whatever changed."""
        key = ObjectKey.of(obj)
        before = self._known.pop(key, None)
        known = self._knowing(key, obj)
        if event != "DELETED" and key.kind in self._followed:
            self._known[key] = known
        changed = before is None or before.fingerprint != known.fingerprint
        self._enqueue_known(key, known, before, changed or event in (None, "DELETED"))

    def _knowing(self, key: ObjectKey, obj: dict[str, Any]) -> Known:
        """What is kept of `obj`: its fingerprint, its owners and what it bears on."""
        meta = obj.get("metadata") or {}
        owners = []
        for owner in meta.get("ownerReferences") or []:
            info = self._info(owner.get("kind", ""))
            if info is not None:
                where = key.namespace if info.namespaced else None
                owners.append(ObjectKey(info.kind, where, owner["name"]))
        related = self.related.get(key.kind)
        bearing = frozenset(related(obj)) if related is not None else frozenset()
        return Known(fingerprint(obj), tuple(owners), bearing)

    def _enqueue_known(
        self, key: ObjectKey, known: Known, before: Known | None, itself: bool
    ) -> None:
        """Queue `known`'s owners, what it bears on and what it bore on `before`, and the
        object itself when `itself`."""
        if itself:
            self.enqueue(key.kind, key.namespace, key.name)
        for owner in known.owners:
            self.enqueue(owner.kind, owner.namespace, owner.name)
        bore = before.bearing if before is not None else frozenset()
        for kind, where, name in sorted(known.bearing | bore, key=str):
            self.enqueue(kind, where, name)

    def _info(self, kind: str) -> KindInfo | None:
        reconciler = self.reconcilers.get(kind)
        return None if reconciler is None else reconciler.info

    def _kinds(self) -> list[KindInfo]:
        """The reconciled kinds, the related ones and the owned ones."""
        kinds = {kind: reconciler.info for kind, reconciler in self.reconcilers.items()}
        for kind in self.related.keys() - kinds.keys():
            kinds[kind] = self.source.registry.by_kind(kind)
        for info in self.owned:
            kinds.setdefault(info.kind, info)
        return list(kinds.values())

    def _listed(self, kinds: Sequence[KindInfo], objects: Iterable[dict[str, Any]]) -> None:
        """Queue each of `objects` (every object of `kinds` now), its owners and what it bears
        on; and each object of `kinds` kept that `objects` no longer has, as deleted."""
        names = {info.kind for info in kinds}
        listed: set[ObjectKey] = set()
        for obj in objects:
            self._enqueue_object(obj)
            listed.add(ObjectKey.of(obj))
        gone = [key for key in self._known if key.kind in names and key not in listed]
        for key in gone:
            self._enqueue_known(key, self._known.pop(key), None, True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self._follow()
            except Exception as e:  # the source failed: list and follow again shortly
                log.error("following the objects failed: %s", error_message(e))
                self._stop.wait(1.0)

    def _follow(self) -> None:
        kinds = self._kinds()
        self._followed = {info.kind for info in kinds}
        listing = self.source.follow(kinds)
        watch = listing.changes
        try:
            self._listed(kinds, listing.objects)
            resynced = time.monotonic()
            while not self._stop.is_set():
                try:
                    events = watch.next(WATCH_POLL)
                except KindsGone as gone:
                    lost = ", ".join(info.plural for info in gone.kinds)
                    log.info("listing %s again: %s", lost, gone.message)
                    self._listed(gone.kinds, watch.relist(gone.kinds))
                    continue
                for event in events:
                    if event.type != "BOOKMARK":
                        self._enqueue_object(event.object, event.type)
                if time.monotonic() - resynced >= self.resync:
                    self._listed(kinds, (obj for info in kinds for obj in self.source.list(info)))
                    self.source.expire_events()
                    resynced = time.monotonic()
        except GoneError:
            return  # a listing's pages no longer kept: list every kind again
        finally:
            watch.close()

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                self._reconcile(key)
            except Exception as e:  # a failure of the error path itself: retry later
                log.error("reconcile of %s failed: %s", key, error_message(e))
                self.queue.add_rate_limited(key)
            finally:
                self.queue.done(key)

    def _reconcile(self, key: ObjectKey) -> None:
        reconciler = self.reconcilers[key.kind]
        obj = self.client.get(reconciler.info.model, key.namespace, key.name)
        if obj is None:
            self.queue.forget(key)
            return
        try:
            result = reconciler.reconcile(obj)
        except Exception as e:
            result = Result.failed(e)
        if result.error is not None:
            self._failed(key, result.error)
            return
        if self.queue.backoff.failures(key):
            self._recovered(key)
        self.queue.forget(key)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)

    def _failed(self, key: ObjectKey, error: Exception) -> None:
        delay = self.queue.add_rate_limited(key)
        if isinstance(error, ConflictError):
            return  # the object changed meanwhile: the next reconcile sees the new one
        message = error_message(error)
        log.warning("reconcile of %s failed (again in %.1f s): %s", key, delay, message)
        try:
            obj = self._show(key, False, RECONCILE_ERROR, message)
            if obj is not None:
                self.client.event(obj, "Warning", RECONCILE_ERROR, message)
        except DiskferryError as e:
            log.warning("cannot show the error on %s: %s", key, e.message)

    def _recovered(self, key: ObjectKey) -> None:
        self._show(key, True, RECONCILED, only_after_failure=True)

    def _show(
        self,
        key: ObjectKey,
        ok: bool,
        reason: str,
        message: str = "",
        only_after_failure: bool = False,
    ) -> Resource | None:
        """Set the `Reconciled` condition on the object as it is now (what the reconcile wrote
        before it failed is kept), and return that object; None when it is gone."""
        obj = self.client.get(self.reconcilers[key.kind].info.model, key.namespace, key.name)
        if obj is None:
            return None
        conditions = (obj.to_json().get("status") or {}).get("conditions") or []
        before = find(conditions, RECONCILED)
        if only_after_failure and (before is None or before.get("status") != "False"):
            return obj
        updated = set_condition(obj, conditions, RECONCILED, ok, reason, message)
        return self.client.patch_status(obj, {"conditions": updated})
