"""The machine's load average over a benchmark, sampled in the background."""

from __future__ import annotations

import os
import threading
from types import TracebackType

_EVERY = 10.0


class LoadWatch:
    """Samples the 1-minute load average every 10 s while the block runs (and at its ends)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            self.samples.append(os.getloadavg()[0])
            if self._stop.wait(_EVERY):
                return

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> str:
        """The lowest and highest load average seen, as a sentence."""
        low, high = min(self.samples), max(self.samples)
        return (
            f"Load average (1 min) during the run: from {low:.1f} to {high:.1f}, sampled every "
            f"{_EVERY:.0f} s on {os.cpu_count()} cores."
        )
