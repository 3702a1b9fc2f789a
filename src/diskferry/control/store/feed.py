"""Watches: the change feed followed from a resourceVersion, waiters woken on each write."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diskferry.control.errors import GoneError
from diskferry.control.store.db import Change, Database

BATCH = 500
Match = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK, and the object."""

    type: str
    object: dict[str, Any]


class Feed:
    """The last committed resourceVersion, and a condition that wakes watches when it moves."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._rv = 0
        self._closed = False

    def published(self, rv: int) -> None:
        """A write up to `rv` was committed: wake every watch."""
        with self._condition:
            self._rv = max(self._rv, rv)
            self._condition.notify_all()

    def wait_past(self, rv: int, timeout: float, stopped: Callable[[], bool]) -> bool:
        """Wait up to `timeout` seconds for a write after `rv`; False when none came."""
        with self._condition:
            return self._condition.wait_for(
                lambda: self._rv > rv or stopped() or self._closed, timeout
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


def too_old(rv: int, trimmed: int) -> GoneError:
    """The 410 Kubernetes answers for a watch from a resourceVersion no longer kept."""
    return GoneError(f"too old resource version: {rv} ({trimmed + 1})")


def translate(change: Change, match: Match) -> WatchEvent | None:
    """The event a watch filtered by `match` sees of `change`, None when none.

    An object that starts or stops matching is ADDED or DELETED, as Kubernetes' watch cache
    shows it.
    """
    now = match(change.data)
    before = change.old is not None and match(change.old)
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
    """A watch from a resourceVersion: `next(timeout)` blocks until events come; thread-safe."""

    def __init__(
        self,
        db: Database,
        feed: Feed,
        *,
        start: int,
        kind: str | None,
        namespace: str | None,
        match: Match,
        initial: list[WatchEvent],
        bookmark: Callable[[int], dict[str, Any]],
    ) -> None:
        self._db = db
        self._feed = feed
        self._kind = kind
        self._namespace = namespace
        self._match = match
        self._pending = initial
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

        GoneError when the watch fell so far behind that the feed was trimmed past it.
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._pending:
                events, self._pending = self._pending, []
                return events
            while not (self._closed or self._feed.closed):
                events = self._read()
                if events:
                    return events
                left = deadline - time.monotonic()
                if left <= 0 or not self._feed.wait_past(
                    self._position, left, lambda: self._closed
                ):
                    return []
            return []

    def _read(self) -> list[WatchEvent]:
        with self._db.read() as tx:
            trimmed = tx.trimmed()
            if self._position < trimmed:
                raise too_old(self._position, trimmed)
            latest = tx.current_rv()
            changes = tx.changes_after(self._position, self._kind, self._namespace, BATCH)
        self._position = changes[-1].rv if len(changes) == BATCH else max(latest, self._position)
        events = (translate(change, self._match) for change in changes)
        return [event for event in events if event is not None]

    def bookmark(self) -> WatchEvent:
        """A BOOKMARK event carrying the resourceVersion seen so far."""
        return WatchEvent("BOOKMARK", self._bookmark(self._position))

    def close(self) -> None:
        """Stop the watch: a blocked `next` returns []."""
        self._closed = True
        self._feed.wake()
