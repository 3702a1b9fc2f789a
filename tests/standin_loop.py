"""What each controller of the stand-in cluster runs on: a thread that calls its `sync` whenever
the stand-in's store changes, and every `period` seconds besides, until stopped. A sync reads
the objects as they are now and makes one step towards what they ask (level-triggered, as
Kubernetes' controllers are), so a change it missed is taken at the next one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.apiserver.store.feed import Watch
from diskferry.control.errors import GoneError
from diskferry.control.resources.kinds import KindInfo

log = logging.getLogger("standin")
PERIOD = 1.0


def kind(service: ObjectService, name: str, group: str = "") -> KindInfo:
    """The stand-in's kind `name` of `group` (core when "")."""
    return service.registry.by_kind(name, group)


class Loop:
    """Calls `sync` in a thread named `name` after each change of the store and every `period`
    seconds; an exception a sync raises is logged, and the next sync goes on."""

    def __init__(
        self, service: ObjectService, name: str, sync: Callable[[], None], period: float = PERIOD
    ) -> None:
        self.service = service
        self.name = name
        self.sync = sync
        self.period = period
        self._stop = threading.Event()
        self._watch: Watch | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Begin syncing."""
        self._thread.start()

    def _follow(self) -> Watch:
        self._watch = self.service.watch(
            None, None, resource_version=self.service.resource_version()
        )
        return self._watch

    def _run(self) -> None:
        watch = self._follow()
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:  # a stand-in controller goes on, as a real one does
                log.exception("%s: a sync failed", self.name)
            try:
                watch.next(self.period)
            except GoneError:
                watch = self._follow()

    def stop(self) -> None:
        """Stop syncing, once the sync under way is done."""
        self._stop.set()
        if self._watch is not None:
            self._watch.close()
        self._thread.join()
