"""JobStatus: what a running job's /progress shows, its progress, last events and details."""

from __future__ import annotations

import logging
import threading
from collections import deque
from datetime import UTC, datetime
from typing import Any

from diskferry.disk.progress import Progress
from diskferry.worker.reporter import EventType, Reporter

log = logging.getLogger("diskferry.worker")
EVENTS_KEPT = 20


class JobStatus(Reporter):
    """A job's state for /progress and /metrics; the events it is told are logged on stderr too."""

    def __init__(
        self, kind: str, job_id: str | None, progress: Progress, keep: int = EVENTS_KEPT
    ) -> None:
        self.kind = kind
        self.job_id = job_id
        self.progress = progress
        self._lock = threading.Lock()
        self._events: deque[dict[str, Any]] = deque(maxlen=keep)
        self._seq = 0
        self._details: dict[str, Any] = {}

    def event(self, type: EventType, reason: str, message: str) -> None:
        """Keep the event (the oldest goes once `keep` are held) and log it."""
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        with self._lock:
            self._seq += 1
            self._events.append(
                {"seq": self._seq, "time": now, "type": type, "reason": reason, "message": message}
            )
        level = logging.WARNING if type == EventType.WARNING else logging.INFO
        log.log(level, "%s: %s", reason, message)

    def details(self, **facts: Any) -> None:
        """Merge `facts` into the details."""
        with self._lock:
            self._details.update(facts)

    def to_json(self) -> dict[str, Any]:
        """The /progress document."""
        with self._lock:
            events, details = list(self._events), dict(self._details)
        return {
            "jobId": self.job_id,
            "kind": self.kind,
            **self.progress.to_dict(),
            "events": events,
            "details": details,
        }
