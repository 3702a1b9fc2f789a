"""The manager's Source over a cluster's API: each kind listed, then watched from its listing's
resourceVersion, as client-go's reflector does. A listing is read a page at a time as the
manager takes its objects, so that a kind's whole objects are held a page at a time however
many there are (the manager keeps a key and a digest of each).

Each kind's watch runs in a thread of its own and asks for `watch_seconds` at a time; when a
request ends it asks again from the last resourceVersion it saw (a bookmark's too), so that
nothing is missed and nothing is read twice. A watch the API answers 410 Gone (the change it
would resume from is no longer kept) ends the changes with GoneError, and the manager lists
again; one whose connection keeps failing through the backoff's attempts ends them with that
error, and the manager lists again a moment later.

The changes wait for the manager in one buffer of at most `buffer` changes (BUFFER), so that a
reader slower than the changes holds a bounded number of objects: a watch that finds the buffer
full drops its change and stops, and the changes end with GoneError, as when the API no longer
keeps what a watch would resume from (a reflector's answer to 410): the manager lists again, and
the changes held until then, which that listing supersedes, are let go.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.errors import GoneError
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.runtime.source import Listing
from diskferry.kube.api import KubeApi

log = logging.getLogger("diskferry.kube")
WATCH_SECONDS = 300  # each watch request's length; client-go's reflector asks for 5 to 10 min
BATCH = 500  # changes handed to the manager at once
BUFFER = 10_000  # changes held for the manager at the most, each a whole object


@dataclass(frozen=True)
class KubeChange:
    """One event of a watch: its type and the object."""

    type: str
    object: dict[str, Any]


class KindWatches:
    """The changes of each kind from its own resourceVersion, merged as they come, at most
    `buffer` of them held until they are taken."""

    def __init__(
        self,
        api: KubeApi,
        seconds: int,
        buffer: int = BUFFER,
        selectors: Mapping[str, str | None] | None = None,
    ) -> None:
        self.api = api
        self.seconds = seconds
        self.selectors = dict(selectors or {})
        self._changes: queue.Queue[KubeChange] = queue.Queue(maxsize=buffer)
        self._ended: DiskferryError | None = None  # the first error that ended a kind's watch
        self._stop = threading.Event()

    def watch(self, info: KindInfo, version: str) -> None:
        """Follow the kind's changes after `version`, in a thread of its own."""
        threading.Thread(
            target=self._follow, args=(info, version), name=f"watch-{info.plural}", daemon=True
        ).start()

    def _follow(self, info: KindInfo, version: str) -> None:
        """Watch the kind from `version` until closed, each request resumed where the last one
        ended, or until an error ends it (see `_end`)."""
        failures = 0
        while not self._stop.is_set():
            try:
                selector = self.selectors.get(info.kind)
                events = self.api.watch(
                    info.api_version, info.kind, version, self.seconds, selector
                )
                for event in events:
                    if self._stop.is_set():
                        return
                    failures = 0
                    obj = event["object"]
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] == "BOOKMARK":
                        continue
                    try:
                        self._changes.put_nowait(KubeChange(event["type"], obj))
                    except queue.Full:
                        held = self._changes.maxsize
                        message = f"the changes of {info.plural} outran their reader ({held} held)"
                        log.warning("%s: listing again", message)
                        self._end(GoneError(message))
                        return
            except GoneError as error:
                log.info("the watch of %s expired (%s): listing again", info.plural, error.message)
                self._end(error)
                return
            except DiskferryError as error:
                failures += 1
                if failures >= self.api.backoff.attempts:
                    self._end(error)
                    return
                delay = self.api.backoff.delay(failures)
                log.warning(
                    "the watch of %s failed: %s; again in %.1f s", info.plural, error, delay
                )
                self._stop.wait(delay)

    def _end(self, error: DiskferryError) -> None:
        """Say `error` at the next `next`: the changes are no longer whole (the first error
        stands; the others' watches end too)."""
        self._ended = self._ended or error
        self._stop.set()

    def held(self) -> int:
        """How many changes wait to be taken."""
        return self._changes.qsize()

    def next(self, timeout: float) -> list[KubeChange]:
        """The changes that came within `timeout` seconds; the error that ended a kind's watch
        (GoneError when changes were lost: the API no longer kept them, or the buffer was
        full), before any change still held."""
        try:
            first = None if self._ended else self._changes.get(timeout=timeout)
        except queue.Empty:
            first = None
        if self._ended is not None:
            raise self._ended
        if first is None:
            return []
        taken = [first]
        while len(taken) < BATCH:
            try:
                taken.append(self._changes.get_nowait())
            except queue.Empty:
                break
        return taken

    def close(self) -> None:
        """Stop every watch (each ends at its next event, or when its request ends)."""
        self._stop.set()


class ClusterSource:
    """Lists and watches the registry's kinds in a cluster. Only the kinds it is asked to follow
    are watched (the operator may read others, such as Secrets, by name alone): a change of an
    object of another kind reaches its owner at the next resync. Of a kind `selectors` names
    (by kind), only the objects its label selector matches are listed and watched."""

    def __init__(
        self,
        api: KubeApi,
        registry: Registry,
        *,
        watch_seconds: int = WATCH_SECONDS,
        buffer: int = BUFFER,
        selectors: Mapping[str, str | None] | None = None,
    ) -> None:
        self.api = api
        self.registry = registry
        self.watch_seconds = watch_seconds
        self.buffer = buffer
        self.selectors = dict(selectors or {})

    def _pages(self, info: KindInfo) -> Iterator[tuple[list[dict[str, Any]], str]]:
        selector = self.selectors.get(info.kind)
        return self.api.pages(info.api_version, info.kind, label_selector=selector)

    def list(self, info: KindInfo) -> Iterator[dict[str, Any]]:
        """Every object of the kind, in every namespace, a page read as the last is taken."""
        for items, _ in self._pages(info):
            yield from items

    def follow(self, kinds: Sequence[KindInfo]) -> Listing:
        """Every object of `kinds` now, and their changes from then on: each kind's first page
        is read here and its watch starts from that page's resourceVersion (every page of a
        listing is of that one); its other pages are read as the objects before are taken."""
        watches = KindWatches(self.api, self.watch_seconds, self.buffer, self.selectors)
        listed: list[Iterator[dict[str, Any]]] = []
        try:
            for info in kinds:
                pages = self._pages(info)
                first, version = next(pages)
                watches.watch(info, version)
                listed.append(self._rest(first, pages))
        except Exception:
            watches.close()  # the kinds watched so far
            raise
        return Listing(itertools.chain.from_iterable(listed), watches)

    @staticmethod
    def _rest(
        first: list[dict[str, Any]], pages: Iterator[tuple[list[dict[str, Any]], str]]
    ) -> Iterator[dict[str, Any]]:
        """The objects of a first page, then of each page after it, read as they are taken."""
        yield from first
        for items, _ in pages:
            yield from items

    def expire_events(self) -> None:
        """Nothing: the cluster's API server expires Events itself."""
