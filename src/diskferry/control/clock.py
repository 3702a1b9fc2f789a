"""Time as the store writes it: an injectable clock and RFC 3339 UTC stamps to the second."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


def rfc3339(moment: datetime) -> str:
    """`moment` as Kubernetes writes a timestamp: UTC, whole seconds, `Z` (2026-01-02T03:04:05Z)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Clock:
    """The wall clock; tests pass a ManualClock instead."""

    def now(self) -> datetime:
        """The current time, in UTC."""
        return datetime.now(UTC)

    def stamp(self) -> str:
        """The current time as an RFC 3339 timestamp."""
        return rfc3339(self.now())


class ManualClock(Clock):
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = (start or datetime(2026, 1, 1, tzinfo=UTC)).astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The time it was last set to."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` forward."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
