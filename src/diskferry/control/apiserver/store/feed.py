"""Watches: the change feed followed from a resourceVersion, through one window of the recent
changes that every watch shares."""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diskferry.control.apiserver.store.db import Change, Database, Key
from diskferry.control.apiserver.store.document import Document
from diskferry.control.apiserver.store.selectors import Matcher
from diskferry.control.errors import GoneError

BATCH = 500
# The encoded objects (as written, and as they were before) of the recent changes the window
# keeps. A watch that falls further behind is gone (410) and lists again, as one that falls
# behind kube-apiserver's watch cache.
WINDOW_BYTES = 16 << 20
# The encoded objects one page of a watch's first list holds (one object at least).
PAGE_BYTES = 1 << 20
# How often waiting watches look in the store for changes another process committed.
REFRESH_SECONDS = 0.5


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    document: Document

    @property
    def object(self) -> dict[str, Any]:
        """The object, shared with every other watch that sees it: do not change it."""
        return self.document.value


def too_old(rv: int, oldest: int) -> GoneError:
    """The 410 Kubernetes answers for a watch from a resourceVersion no longer kept."""
    return GoneError(f"too old resource version: {rv} ({oldest + 1})")


class Feed:
    """The recent changes of the store in the order they were committed, shared by every watch,
    and a condition that wakes the watches when more come.

    The window holds every change after `first`, as many as WINDOW_BYTES and the store's
    feed allow: each change's objects are read once, kept encoded, and parsed (when a watch
    needs the values) once for all the watches.
    """

    def __init__(self, db: Database) -> None:
        self._condition = threading.Condition()  # reentrant: `after` holds it to `check`
        self._db = db
        self._refresh_lock = threading.Lock()
        self._refreshed = 0.0
        self._changes: list[Change] = []
        self._bytes = 0
        self._closed = False
        with self._condition:  # a commit from now on waits until the window is filled
            self._last = db.subscribe(self._committed)
            with db.read() as tx:
                for change in tx.latest_changes():
                    if change.rv > self._last:
                        continue
                    if self._bytes + change.size > WINDOW_BYTES:
                        break
                    self._changes.append(change)
                    self._bytes += change.size
            self._changes.reverse()
            self._first = self._changes[0].rv - 1 if self._changes else self._last

    def _committed(self, changes: list[Change], trimmed: int) -> None:
        """A transaction committed `changes`, the store's feed now starting after `trimmed`:
        keep them, drop the oldest beyond the window's bounds, and wake every watch."""
        with self._condition:
            self._changes.extend(changes)
            self._bytes += sum(change.size for change in changes)
            self._last = changes[-1].rv
            gone = 0
            for change in self._changes:
                if change.rv > trimmed and self._bytes <= WINDOW_BYTES:
                    break
                self._bytes -= change.size
                self._first = change.rv
                gone += 1
            del self._changes[:gone]
            self._condition.notify_all()

    def check(self, rv: int) -> None:
        """GoneError when the window no longer holds every change after `rv`."""
        with self._condition:
            if rv < self._first:
                raise too_old(rv, self._first)

    def after(self, rv: int, kind: str | None, namespace: str | None) -> tuple[list[Change], int]:
        """Up to BATCH changes after `rv` (of `kind`, in `namespace` when given), oldest first,
        and the resourceVersion a watch has seen every change up to once it has these.

        GoneError when the window no longer holds every change after `rv`.
        """
        with self._condition:
            self.check(rv)
            start = bisect.bisect_right(self._changes, rv, key=lambda change: change.rv)
            found: list[Change] = []
            for change in itertools.islice(self._changes, start, None):
                if len(found) == BATCH:
                    return found, found[-1].rv
                if kind in (None, change.kind) and namespace in (None, change.namespace):
                    found.append(change)
            return found, max(rv, self._last)

    def refresh(self) -> None:
        """Take in the changes another process committed, at most every REFRESH_SECONDS."""
        now = time.monotonic()
        with self._refresh_lock:
            if now - self._refreshed < REFRESH_SECONDS:
                return
            self._refreshed = now
        self._db.catch_up()  # never under the condition: a commit takes the two the other way

    def wait_past(self, rv: int, timeout: float, stopped: Callable[[], bool]) -> bool:
        """Wait up to `timeout` seconds for a change after `rv`; False when none came."""
        with self._condition:
            return self._condition.wait_for(
                lambda: self._last > rv or stopped() or self._closed, timeout
            ) and not (stopped() or self._closed)

    @property
    def closed(self) -> bool:
        """Whether the store was closed: watches return no more events."""
        return self._closed

    def close(self) -> None:
        """Wake every watch for good."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def wake(self) -> None:
        """Wake every watch, so that a closed one notices."""
        with self._condition:
            self._condition.notify_all()


def translate(change: Change, match: Matcher) -> WatchEvent | None:
    """The event a watch filtered by `match` sees of `change`, None when none.

    An object that starts or stops matching is ADDED or DELETED, as Kubernetes' watch cache
    shows it. Without a selector no object is parsed.
    """
    everything = match.everything
    now = everything or match(change.data.value)
    before = change.old is not None and (everything or match(change.old.value))
    if change.type == "DELETED":
        return WatchEvent("DELETED", change.data) if now or before else None
    if now and before:
        return WatchEvent("MODIFIED", change.data)
    if now:
        return WatchEvent("ADDED", change.data)
    if before:
        return WatchEvent("DELETED", change.data)
    return None


class Watch:
    """A watch from a resourceVersion: `next(timeout)` blocks until events come; thread-safe.

    A watch with kinds to list first sends their objects as they were at `start`, a page at
    a time, as ADDED events; then the changes after `start`. GoneError (at once, or from
    `next`) when the feed no longer reaches back to where the watch is.
    """

    def __init__(
        self,
        db: Database,
        feed: Feed,
        *,
        start: int,
        kind: str | None,
        namespace: str | None,
        match: Matcher,
        listing: list[str],
        bookmark: Callable[[int], dict[str, Any]],
    ) -> None:
        feed.check(start)
        self._db = db
        self._feed = feed
        self._kind = kind
        self._namespace = namespace
        self._match = match
        self._listing = list(listing)
        self._listed: Key | None = None
        self._bookmark = bookmark
        self._position = start
        self._closed = False
        self._lock = threading.Lock()

    @property
    def resource_version(self) -> str:
        """The resourceVersion the watch has seen every change up to."""
        return str(self._position)

    def next(self, timeout: float) -> list[WatchEvent]:
        """The next events, waiting up to `timeout` seconds; [] when none came or closed.

        GoneError when the watch fell so far behind that the feed no longer reaches it.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._listing:
                events = self._page()
                if events:
                    return events
            while not (self._closed or self._feed.closed):
                changes, self._position = self._feed.after(
                    self._position, self._kind, self._namespace
                )
                events = [e for e in (translate(c, self._match) for c in changes) if e]
                if events:
                    return events
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._feed.refresh()
                wait = min(left, REFRESH_SECONDS)
                self._feed.wait_past(self._position, wait, lambda: self._closed)
            return []

    def _page(self) -> list[WatchEvent]:
        """The matching objects of the next page of the first list, as ADDED events."""
        events: list[WatchEvent] = []
        size = 0
        with self._db.read() as tx:
            if self._position < tx.trimmed():
                raise too_old(self._position, tx.trimmed())
            rows = tx.texts_at(self._listing[0], self._namespace, self._listed, self._position)
            for key, text in rows:
                self._listed = key
                document = Document(text.encode())
                if self._match.everything or self._match(document.value):
                    events.append(WatchEvent("ADDED", document))
                size += len(document.text)
                if size >= PAGE_BYTES:
                    return events
        self._listing.pop(0)
        self._listed = None
        return events

    def bookmark(self) -> WatchEvent:
        """A BOOKMARK event carrying the resourceVersion seen so far."""
        return WatchEvent("BOOKMARK", Document.of(self._bookmark(self._position)))

    def close(self) -> None:
        """Stop the watch: a blocked `next` returns []."""
        self._closed = True
        self._feed.wake()
