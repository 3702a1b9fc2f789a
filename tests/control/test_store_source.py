"""StoreSource, the manager's Source over the embedded store: one watch of every kind after a
listing; a watch the store's feed no longer reaches names every kind listed as lost, and
listing them again follows on from there."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import WIDGETS, make_service, widget

from diskferry.control.apiserver.store.db import TRIM_EVERY
from diskferry.control.runtime.source import KindsGone, StoreSource

KEEP_CHANGES = 10
MISSED = 2 * TRIM_EVERY  # the store trims what it keeps every TRIM_EVERY changes


def test_a_watch_the_feed_no_longer_reaches_lists_every_kind_again(tmp_path: Path) -> None:
    objects = make_service(tmp_path, keep_changes=KEEP_CHANGES)
    try:
        objects.create(WIDGETS, "default", widget("listed"))
        listing = StoreSource(objects).follow([WIDGETS])
        assert [o["metadata"]["name"] for o in listing.objects] == ["listed"]
        for n in range(MISSED):  # changes the watch does not take in time
            objects.create(WIDGETS, "default", widget(f"missed-{n}"))
        objects.delete(WIDGETS, "default", "listed")
        with pytest.raises(KindsGone) as gone:
            listing.changes.next(0)
        assert gone.value.kinds == (WIDGETS,)
        again = {o["metadata"]["name"] for o in listing.changes.relist(gone.value.kinds)}
        assert again == {f"missed-{n}" for n in range(MISSED)}
        objects.create(WIDGETS, "default", widget("after"))
        changes = listing.changes.next(5)
        assert [(c.type, c.object["metadata"]["name"]) for c in changes] == [("ADDED", "after")]
        listing.changes.close()
    finally:
        objects.close()
