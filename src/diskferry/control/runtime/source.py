"""Where the manager finds the objects it reconciles and hears of their changes: the Source
protocol, and StoreSource over the embedded store.

A source lists the kinds it is asked for and follows, from the moment of that listing, the
changes of every kind it follows (the embedded store follows all; a cluster's API client, the
kinds it watches). Changes it can no longer give (a watch too far behind, 410 Gone, a full
buffer) end with KindsGone, which names the kinds that lost some: the manager lists those
kinds again through `Changes.relist`, which follows them again from that listing, while the
other kinds' changes go on from where they were (the embedded store keeps one feed of every
kind, so a watch too far behind it names every kind). Any other GoneError (a listing's pages
no longer kept) means the manager follows every kind again from a new listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from diskferry.control.errors import GoneError
from diskferry.control.resources.kinds import KindInfo, Registry

if TYPE_CHECKING:
    from diskferry.control.apiserver.objects import ObjectService
    from diskferry.control.apiserver.store.feed import Watch, WatchEvent


class KindsGone(GoneError):
    """Changes of `kinds` were lost (those of the other kinds followed were not): list them
    again with `Changes.relist`."""

    def __init__(self, message: str, kinds: Sequence[KindInfo]) -> None:
        super().__init__(message)
        self.kinds = tuple(kinds)


class Change(Protocol):
    """One change: ADDED, MODIFIED, DELETED (or BOOKMARK, which carries no object's news) and
    the object as it is after it (as it was, for DELETED)."""

    @property
    def type(self) -> str:
        """ADDED, MODIFIED, DELETED or BOOKMARK."""
        ...

    @property
    def object(self) -> dict[str, Any]:
        """The object, as API values; not to be changed."""
        ...


class Changes(Protocol):
    """The changes since a listing, as they come."""

    def next(self, timeout: float) -> Sequence[Change]:
        """The changes that came within `timeout` seconds, oldest first (none when none came);
        KindsGone when those of some kinds were lost and these must be listed again."""
        ...

    def relist(self, kinds: Sequence[KindInfo]) -> Iterable[dict[str, Any]]:
        """Every object of `kinds` (those a KindsGone named) now, to be taken once before the
        next changes, and their changes followed again from then on."""
        ...

    def close(self) -> None:
        """Stop following."""
        ...


@dataclass
class Listing:
    """Every object of the kinds listed (to be taken once, before the changes), and their
    changes (and those of the other kinds the source follows) from the moment of that
    listing."""

    objects: Iterable[dict[str, Any]]
    changes: Changes


class Source(Protocol):
    """Lists kinds and follows their changes, for the manager."""

    registry: Registry

    def list(self, info: KindInfo) -> Iterable[dict[str, Any]]:
        """Every object of the kind, in every namespace (to be taken once)."""
        ...

    def follow(self, kinds: Sequence[KindInfo]) -> Listing:
        """Every object of `kinds` now, and the changes from now on."""
        ...

    def expire_events(self) -> None:
        """Delete the Events too old to keep, where nobody else does."""
        ...


def _listed(
    objects: ObjectService, kinds: Sequence[KindInfo]
) -> tuple[list[dict[str, Any]], Watch]:
    """Every object of `kinds` now, and a watch of every kind's changes from then on."""
    version = objects.resource_version()
    listed = [obj for info in kinds for obj in objects.list(info, None).items]
    return listed, objects.watch(None, None, resource_version=version)


class StoreChanges:
    """The changes of every kind in the embedded store after a listing of `kinds`, through one
    watch of its feed: a watch the feed no longer reaches has lost the changes of every kind,
    so its KindsGone names every kind listed, and `relist` lists them all and watches again."""

    def __init__(self, objects: ObjectService, kinds: Sequence[KindInfo], watch: Watch) -> None:
        self.objects = objects
        self.kinds = tuple(kinds)
        self._watch = watch

    def relist(self, kinds: Sequence[KindInfo]) -> list[dict[str, Any]]:
        """Every object of `kinds` (every kind listed: the one watch follows them all) now, and
        the changes of every kind from then on."""
        listed, watch = _listed(self.objects, kinds)
        self._watch.close()
        self._watch = watch
        return listed

    def next(self, timeout: float) -> list[WatchEvent]:
        """The changes of every kind that came within `timeout` seconds; KindsGone naming every
        kind listed when the feed no longer reaches back to them."""
        try:
            return self._watch.next(timeout)
        except GoneError as error:
            raise KindsGone(error.message, self.kinds) from None

    def close(self) -> None:
        """Stop the watch."""
        self._watch.close()


class StoreSource:
    """The embedded store as a source: one watch of every kind, from the listing's
    resourceVersion."""

    def __init__(self, objects: ObjectService) -> None:
        self.objects = objects
        self.registry = objects.registry

    def list(self, info: KindInfo) -> list[dict[str, Any]]:
        """Every object of the kind, in every namespace."""
        return self.objects.list(info, None).items

    def follow(self, kinds: Sequence[KindInfo]) -> Listing:
        """Every object of `kinds` now, and the changes of every kind after."""
        listed, watch = _listed(self.objects, kinds)
        return Listing(listed, StoreChanges(self.objects, kinds, watch))

    def expire_events(self) -> None:
        """Delete the Events last seen over an hour ago, as Kubernetes does."""
        self.objects.expire_events()
