"""A worker's /progress as the status fields Deckhouse writes: `progress` and `downloadSpeed`,
and when they are written: at most once a second per object, and only when a value shown
(the percent, or a speed as text) changed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from diskferry.control.runtime.runner.base import JobState

_UNITS = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
PROGRESS_FIELDS = ("progress", "downloadSpeed")
WRITE_INTERVAL = 1.0


def percent_text(percent: float) -> str:
    """ "0%", "NN.N%" or "100%"."""
    if percent <= 0:
        return "0%"
    if percent >= 100:
        return "100%"
    return f"{min(percent, 99.9):.1f}%"


def speed_text(bytes_per_second: float) -> str:
    """A speed as Deckhouse writes it, in binary units: "512/s", "1.5Mi/s", "12Mi/s"."""
    value = float(max(bytes_per_second, 0))
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    number = f"{value:.1f}" if unit and value < 10 else f"{value:.0f}"
    return f"{number}{_UNITS[unit]}/s"


def progress_fields(progress: dict[str, Any]) -> dict[str, Any]:
    """The status fields a /progress document gives."""
    average = round(progress.get("averageSpeed") or 0)
    current = round(progress.get("currentSpeed") or 0)
    return {
        "progress": percent_text(float(progress.get("percent") or 0)),
        "downloadSpeed": {
            "avg": speed_text(average),
            "avgBytes": str(average),
            "current": speed_text(current),
            "currentBytes": str(current),
        },
    }


def unchanged(status: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Whether `status` holds every one of `fields` already (so nothing need be written)."""
    return all(status.get(key) == value for key, value in fields.items())


def shown(fields: dict[str, Any]) -> tuple[Any, ...]:
    """What of the progress fields a user reads: the percent and the speeds as text (the byte
    counts beside them change on every look)."""
    speed = fields.get("downloadSpeed") or {}
    return fields.get("progress"), speed.get("avg"), speed.get("current")


class ProgressWrites:
    """Decides, per object, when its progress is written: once `interval` seconds have passed
    since it last was, and only when a shown value changed."""

    def __init__(
        self, interval: float = WRITE_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.clock = clock
        self._written: dict[str, float] = {}
        self._lock = threading.Lock()

    def fields(self, key: str, status: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
        """`fields` as they are to be written for the object `key` whose status is `status`:
        whole when its progress is due, else without the progress fields (so that they are
        left as they are)."""
        held = {name: value for name, value in fields.items() if name not in PROGRESS_FIELDS}
        if shown(fields) == shown(status):
            return held
        now = self.clock()
        with self._lock:
            self._written = {k: t for k, t in self._written.items() if now - t < self.interval}
            if key in self._written:
                return held
            self._written[key] = now
        return fields


def job_details(state: JobState | None) -> dict[str, Any]:
    """The details a job published in its /progress (a server's listenPort), {} before it did."""
    return ((state.progress or {}).get("details") or {}) if state else {}
