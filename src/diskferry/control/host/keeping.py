"""Something a host service keeps as it should be: made so at `start`, then again every
`interval` on a thread of its own until `stop`, a failure logged and tried at the next turn."""

from __future__ import annotations

import logging
import threading

log = logging.getLogger("diskferry.control")


class Keeper:
    """A service that `ensure`s its state now and every `interval` seconds, named `name` in
    its thread and its log."""

    def __init__(self, name: str, interval: float) -> None:
        self.name = name
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ensure(self) -> None:
        """Make the state as it should be (each keeper says how)."""
        raise NotImplementedError

    def start(self) -> None:
        """Ensure the state now, then keep it."""
        self.ensure()
        self._stop.clear()
        self._thread = threading.Thread(target=self._keep, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop keeping it (what was made stays)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _keep(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.ensure()
            except Exception as e:  # a failure here must not end the keeping
                log.error("%s: %s", self.name, e)
