"""A work queue keyed by object: each key queued once, handed to one worker at a time, delayed
for a requeue-after or for a backoff that grows with each error of that key.

As client-go's workqueue: a key added while queued is not added twice; a key added while a
worker holds it is queued again once that worker is done with it, never handed to two; a key
waits for one time only, the earliest it was asked for, so that its requeues and resyncs do not
pile up waits that each reconcile it again.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
BASE_DELAY = 0.05
MAX_DELAY = 300.0
SUPERSEDED = 64  # superseded waits kept in the heap beyond twice the waiting keys


class Backoff(Generic[K]):
    """Per-key exponential delays: BASE, 2 BASE, 4 BASE ... up to MAX; `forget` resets."""

    def __init__(self, base: float = BASE_DELAY, maximum: float = MAX_DELAY) -> None:
        self.base = base
        self.maximum = maximum
        self._failures: dict[K, int] = {}
        self._lock = threading.Lock()

    def when(self, key: K) -> float:
        """The delay before `key` is tried again after one more failure."""
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        return min(self.maximum, self.base * 2 ** min(failures, 64))

    def failures(self, key: K) -> int:
        """How many failures of `key` were counted since it was last forgotten."""
        with self._lock:
            return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        """Start `key`'s delays from BASE again."""
        with self._lock:
            self._failures.pop(key, None)


class WorkQueue(Generic[K]):
    """Keys waiting to be reconciled; thread-safe."""

    def __init__(
        self, backoff: Backoff[K] | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.backoff: Backoff[K] = backoff or Backoff()
        self._clock = clock
        self._cond = threading.Condition()
        self._ready: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []  # a heap, with superseded waits
        self._due: dict[K, float] = {}  # when each waiting key is due: its heap entry's time
        self._seq = itertools.count()
        self._shut = False

    def add(self, key: K) -> None:
        """Queue `key` now, unless it is queued already."""
        with self._cond:
            if self._shut or key in self._queued:
                return
            self._queued.add(key)
            if key not in self._processing:
                self._ready.append(key)
                self._cond.notify()

    def add_after(self, key: K, delay: float) -> None:
        """Queue `key` in `delay` seconds (now when `delay` <= 0), unless it waits already for
        a time no later than that."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            due = self._clock() + delay
            waiting = self._due.get(key)
            if self._shut or (waiting is not None and waiting <= due):
                return
            self._due[key] = due
            heapq.heappush(self._delayed, (due, next(self._seq), key))
            if len(self._delayed) > 2 * len(self._due) + SUPERSEDED:
                self._delayed = [(t, next(self._seq), k) for k, t in self._due.items()]
                heapq.heapify(self._delayed)
            self._cond.notify()

    def add_rate_limited(self, key: K) -> float:
        """Queue `key` after its next backoff delay; that delay."""
        delay = self.backoff.when(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset `key`'s backoff (after it was reconciled without error)."""
        self.backoff.forget(key)

    def _promote(self) -> float | None:
        """Move the delayed keys that are due into the queue; seconds to the next one."""
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key = heapq.heappop(self._delayed)
            if self._due.get(key) != due:
                continue  # a wait an earlier one superseded
            del self._due[key]
            if key not in self._queued:
                self._queued.add(key)
                if key not in self._processing:
                    self._ready.append(key)
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float | None = None) -> K | None:
        """The next key, now held by the caller until `done`; None on timeout or shutdown."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while True:
                if self._shut:
                    return None
                next_due = self._promote()
                if self._ready:
                    key = self._ready.popleft()
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                waits = [w for w in (next_due,) if w is not None]
                if deadline is not None:
                    left = deadline - self._clock()
                    if left <= 0:
                        return None
                    waits.append(left)
                self._cond.wait(min(waits) if waits else None)

    def done(self, key: K) -> None:
        """The caller is finished with `key`; queued again meanwhile, it is ready now."""
        with self._cond:
            self._processing.discard(key)
            if key in self._queued and not self._shut:
                self._ready.append(key)
                self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._due)

    def shutdown(self) -> None:
        """Stop handing out keys: every `get` returns None from now on."""
        with self._cond:
            self._shut = True
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        """Whether `shutdown` was called."""
        with self._cond:
            return self._shut
