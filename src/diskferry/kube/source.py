"""The manager's Source over a cluster's API: each kind listed, then watched from its listing's
resourceVersion, as client-go's reflector does. A listing is read a page at a time as the
manager takes its objects, so that a kind's whole objects are held a page at a time however
many there are (the manager keeps a key, a digest and the keys of its owners of each).

Each kind's watch runs in a thread of its own and asks for `watch_seconds` at a time; when a
request ends it asks again from the last resourceVersion it saw (a bookmark's too), so that
nothing is missed and nothing is read twice. One whose connection keeps failing through the
backoff's attempts ends every kind's changes with that error, and the manager lists them all
again a moment later.

The changes wait for the manager in one buffer of at most `buffer` changes (BUFFER), so that a
reader slower than the changes holds a bounded number of objects. A kind loses its changes
when the API answers its watch 410 Gone (the change it would resume from is no longer kept),
or when a change finds the buffer full and that kind holds the most of it (so that one busy
kind does not make the others lose theirs): its watch stops, its changes still held are let go
(the listing to come supersedes them), and `next` raises KindsGone naming it, for the manager
to list it again through `relist`, which watches it again from that listing (a reflector's
answer to 410). The other kinds' watches go on, and their changes held stay. A kind that
loses its changes again within STEADY seconds of its last listing waits longer each time
before it is named (RELISTS), the others' changes given meanwhile, so that a kind that keeps
overflowing is not listed again and again at once.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from diskferry.base.errors import DiskferryError
from diskferry.control.errors import GoneError
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.runtime.source import KindsGone, Listing
from diskferry.kube.api import Backoff, KubeApi

log = logging.getLogger("diskferry.kube")
WATCH_SECONDS = 300  # each watch request's length; client-go's reflector asks for 5 to 10 min
BATCH = 500  # changes handed to the manager at once
BUFFER = 10_000  # changes held for the manager at the most, each a whole object
STEADY = 60.0  # a kind that loses its changes later than this after its listing: at once again
RELISTS = Backoff(first=0.5, most=30.0)  # the wait before a kind that lost again is listed
Pages = Iterator[tuple[list[dict[str, Any]], str]]


def kind_pages(api: KubeApi, info: KindInfo, selector: str | None) -> Pages:
    """The kind's objects matching `selector` (all when None), a page at a time, each with
    the listing's resourceVersion."""
    return api.pages(info.api_version, info.kind, label_selector=selector)


def _rest(first: list[dict[str, Any]], pages: Pages) -> Iterator[dict[str, Any]]:
    """The objects of a first page, then of each page after it, read as they are taken."""
    yield from first
    for items, _ in pages:
        yield from items


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
        self.buffer = buffer
        self.selectors = dict(selectors or {})
        self._ready = threading.Condition()  # guards what follows, and wakes `next`
        self._held: deque[tuple[str, KubeChange]] = deque()  # (kind, change), oldest first
        self._holding: Counter[str] = Counter()  # changes held, by kind
        self._infos: dict[str, KindInfo] = {}
        self._epochs: Counter[str] = Counter()  # each kind's current watch; older ones stop
        self._listed: dict[str, float] = {}  # when each kind was last listed
        self._losses: Counter[str] = Counter()  # losses in a row, by kind
        self._lost: dict[str, tuple[float, str]] = {}  # kind: when to name it, and why
        self._ended: DiskferryError | None = None  # the first error that ended every watch
        self._stop = threading.Event()

    def follow(self, info: KindInfo) -> Iterator[dict[str, Any]]:
        """Every object of the kind now, a page read as the last is taken, and its changes from
        then on: its first page is read here and its watch starts from that page's
        resourceVersion (every page of a listing is of that one)."""
        pages = kind_pages(self.api, info, self.selectors.get(info.kind))
        first, version = next(pages)
        with self._ready:
            self._epochs[info.kind] += 1
            self._infos[info.kind] = info
            self._listed[info.kind] = time.monotonic()
            epoch = self._epochs[info.kind]
        threading.Thread(
            target=self._watch,
            args=(info, version, epoch),
            name=f"watch-{info.plural}",
            daemon=True,
        ).start()
        return _rest(first, pages)

    def relist(self, kinds: Sequence[KindInfo]) -> Iterator[dict[str, Any]]:
        """Every object of `kinds` now, and their changes followed again from then on: each
        kind's first page is read here, its other pages as the objects before are taken."""
        return itertools.chain.from_iterable([self.follow(info) for info in kinds])

    def _current(self, kind: str, epoch: int) -> bool:
        return not self._stop.is_set() and self._epochs[kind] == epoch

    def _watch(self, info: KindInfo, version: str, epoch: int) -> None:
        """Watch the kind from `version` until closed or until it loses its changes, each
        request resumed where the last one ended, or until an error ends every watch."""
        failures = 0
        while self._current(info.kind, epoch):
            try:
                selector = self.selectors.get(info.kind)
                events = self.api.watch(
                    info.api_version, info.kind, version, self.seconds, selector
                )
                for event in events:
                    if not self._current(info.kind, epoch):
                        return
                    failures = 0
                    obj = event["object"]
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if event["type"] == "BOOKMARK":
                        continue
                    if not self._put(info.kind, epoch, KubeChange(event["type"], obj)):
                        return
            except GoneError as error:
                with self._ready:
                    if self._current(info.kind, epoch):
                        why = f"the watch of {info.plural} expired ({error.message})"
                        log.info("%s: listing it again in %.1f s", why, self._lose(info.kind, why))
                return
            except DiskferryError as error:
                failures += 1
                if failures >= self.api.backoff.attempts:
                    self._end(info.kind, epoch, error)
                    return
                delay = self.api.backoff.delay(failures)
                log.warning(
                    "the watch of %s failed: %s; again in %.1f s", info.plural, error, delay
                )
                self._stop.wait(delay)

    def _put(self, kind: str, epoch: int, change: KubeChange) -> bool:
        """Hold `change` of `kind` for the manager; when the buffer is full, the kind holding
        the most of it loses its changes first. False when `kind` lost them (or was closed):
        its watch stops."""
        with self._ready:
            if not self._current(kind, epoch):
                return False
            if len(self._held) >= self.buffer:
                fullest = max(self._holding, key=lambda k: (self._holding[k], k == kind))
                plural = self._infos[fullest].plural
                message = f"the changes of {plural} outran their reader ({len(self._held)} held)"
                wait = self._lose(fullest, message)
                log.warning("%s: listing them again in %.1f s", message, wait)
                if fullest == kind:
                    return False
            self._held.append((kind, change))
            self._holding[kind] += 1
            self._ready.notify_all()
            return True

    def _lose(self, kind: str, why: str) -> float:
        """`kind` lost its changes (`why`): its watch stops, its changes held are let go, and
        it is named to `next` after the wait returned. Called holding `_ready`."""
        self._epochs[kind] += 1
        if self._holding.pop(kind, 0):
            self._held = deque(item for item in self._held if item[0] != kind)
        now = time.monotonic()
        if now - self._listed.get(kind, now) > STEADY:
            self._losses[kind] = 0
        self._losses[kind] += 1
        wait = RELISTS.delay(self._losses[kind] - 1) if self._losses[kind] > 1 else 0.0
        self._lost[kind] = (now + wait, why)
        self._ready.notify_all()
        return wait

    def _end(self, kind: str, epoch: int, error: DiskferryError) -> None:
        """Say `error` at the next `next` and stop every watch, unless the kind's watch that
        failed was already superseded (the first error stands)."""
        with self._ready:
            if self._current(kind, epoch):
                self._ended = self._ended or error
                self._stop.set()
                self._ready.notify_all()

    def held(self) -> int:
        """How many changes wait to be taken."""
        with self._ready:
            return len(self._held)

    def next(self, timeout: float) -> list[KubeChange]:
        """The changes that came within `timeout` seconds; before any change still held,
        KindsGone naming the kinds that lost theirs (once each one's wait is over), or the
        error that ended every watch."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while not self._held:
                now = time.monotonic()
                self._raise_lost(now)
                if now >= deadline:
                    return []
                due = [at for at, _ in self._lost.values()]
                self._ready.wait(min([deadline, *due]) - now)
            self._raise_lost(time.monotonic())
            taken: list[KubeChange] = []
            while self._held and len(taken) < BATCH:
                kind, change = self._held.popleft()
                self._holding[kind] -= 1
                taken.append(change)
            return taken

    def _raise_lost(self, now: float) -> None:
        """The error that ended every watch; else KindsGone naming the kinds lost whose wait is
        over, no longer named after. Called holding `_ready`."""
        if self._ended is not None:
            raise self._ended
        due = [kind for kind, (at, _) in self._lost.items() if at <= now]
        if due:
            why = "; ".join(self._lost.pop(kind)[1] for kind in due)
            raise KindsGone(why, [self._infos[kind] for kind in due])

    def close(self) -> None:
        """Stop every watch (each ends at its next event, or when its request ends)."""
        self._stop.set()
        with self._ready:
            self._ready.notify_all()


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

    def list(self, info: KindInfo) -> Iterator[dict[str, Any]]:
        """Every object of the kind, in every namespace, a page read as the last is taken."""
        for items, _ in kind_pages(self.api, info, self.selectors.get(info.kind)):
            yield from items

    def follow(self, kinds: Sequence[KindInfo]) -> Listing:
        """Every object of `kinds` now, and their changes from then on (KindWatches.relist)."""
        watches = KindWatches(self.api, self.watch_seconds, self.buffer, self.selectors)
        try:
            listed = watches.relist(kinds)
        except Exception:
            watches.close()  # the kinds watched so far
            raise
        return Listing(listed, watches)

    def expire_events(self) -> None:
        """Nothing: the cluster's API server expires Events itself."""
