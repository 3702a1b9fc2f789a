"""Progress: bytes done of total, percent, average and current speed, time left."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

_WINDOW_SECONDS = 3.0


class Progress:
    """Thread-safe progress of one long operation, possibly in named phases."""

    def __init__(self, total: int = 0, phase: str = "", clock=time.monotonic) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._start = clock()
        self._samples: deque[tuple[float, int]] = deque([(self._start, 0)])
        self.total = total
        self.done = 0
        self.phase = phase
        self.finished = False
        self._end = 0.0

    def add(self, n: int) -> None:
        """Count `n` more bytes done."""
        with self._lock:
            self.done += n
            now = self._clock()
            self._samples.append((now, self.done))
            while len(self._samples) > 2 and now - self._samples[1][0] > _WINDOW_SECONDS:
                self._samples.popleft()

    def uncount(self, n: int) -> None:
        """Take back `n` bytes counted done that are to be counted again (a head read twice)."""
        self.add(-n)

    def set_total(self, total: int) -> None:
        """Change the total (when it becomes known or grows)."""
        with self._lock:
            self.total = total

    def set_phase(self, phase: str) -> None:
        """Name the phase the operation is in."""
        with self._lock:
            self.phase = phase

    def finish(self) -> None:
        """Mark the operation done."""
        with self._lock:
            self.finished = True
            self._end = self._clock()

    @property
    def elapsed(self) -> float:
        """Seconds since start (until finish)."""
        end = self._end if self.finished else self._clock()
        return max(end - self._start, 1e-9)

    @property
    def percent(self) -> float:
        """Percent done, 0 to 100."""
        if self.total <= 0:
            return 100.0 if self.finished else 0.0
        return min(100.0, 100.0 * self.done / self.total)

    @property
    def average_speed(self) -> float:
        """Bytes per second since the start."""
        return self.done / self.elapsed

    @property
    def current_speed(self) -> float:
        """Bytes per second over the last few seconds (0 when nothing moved in them)."""
        with self._lock:
            now = self._end if self.finished else self._clock()
            edge = now - _WINDOW_SECONDS
            before: tuple[float, int] | None = None
            for t, d in self._samples:
                if t >= edge:
                    break
                before = (t, d)
            else:
                return 0.0
            if before is None:
                span = now - self._samples[0][0]
                return (self.done - self._samples[0][1]) / span if span > 0 else 0.0
            # the bytes done at the window's edge, between the samples around it
            t0, d0 = before
            at_edge = d0 + (d - d0) * (edge - t0) / (t - t0)
            return (self.done - at_edge) / _WINDOW_SECONDS

    @property
    def eta(self) -> float | None:
        """Seconds left at the current speed, or None when unknown."""
        speed = self.current_speed or self.average_speed
        if self.total <= 0 or speed <= 0:
            return None
        return max(0.0, (self.total - self.done) / speed)

    def to_dict(self) -> dict[str, Any]:
        """The progress as JSON-ready values."""
        return {
            "phase": self.phase,
            "bytesDone": self.done,
            "bytesTotal": self.total,
            "percent": round(self.percent, 2),
            "averageSpeed": round(self.average_speed),
            "currentSpeed": round(self.current_speed),
            "eta": None if self.eta is None else round(self.eta, 1),
            "elapsed": round(self.elapsed, 3),
        }
