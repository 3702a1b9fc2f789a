"""Where the manager finds the objects it reconciles and hears of their changes: the Source
protocol, and StoreSource over the embedded store.

A source lists the kinds it is asked for and follows, from the moment of that listing, the
changes of every kind it follows (the embedded store follows all; a cluster's API client, the
kinds it watches). A change it can no longer give (a watch too far behind, 410 Gone) ends the
changes with GoneError: the manager lists again and follows from there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from diskferry.control.resources.kinds import KindInfo, Registry

if TYPE_CHECKING:
    from diskferry.control.apiserver.objects import ObjectService


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
        GoneError when some were lost and the kinds must be listed again."""
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
        version = self.objects.resource_version()
        listed = [obj for info in kinds for obj in self.objects.list(info, None).items]
        return Listing(listed, self.objects.watch(None, None, resource_version=version))

    def expire_events(self) -> None:
        """Delete the Events last seen over an hour ago, as Kubernetes does."""
        self.objects.expire_events()
