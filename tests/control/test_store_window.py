"""The watches' shared window of recent changes: one parsed copy of each event for every
watch, bounded in bytes, filled again after a restart, and first lists read a page at a time."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import WIDGETS, make_service, widget

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.apiserver.store import feed
from diskferry.control.errors import GoneError


@pytest.fixture
def service(tmp_path: Path) -> ObjectService:
    svc = make_service(tmp_path)
    yield svc
    svc.close()


def test_every_watch_sees_the_one_parsed_copy_of_an_event(service: ObjectService) -> None:
    rv = service.resource_version()
    watches = [service.watch(WIDGETS, None, resource_version=rv) for _ in range(3)]
    selected = service.watch(WIDGETS, None, resource_version=rv, label_selector="app=a")
    service.create(WIDGETS, "default", widget("w", labels={"app": "a"}))
    events = [w.next(1) for w in [*watches, selected]]
    assert [[e.type for e in got] for got in events] == [["ADDED"]] * 4
    first = events[0][0].object
    assert first["metadata"]["name"] == "w"
    assert all(got[0].object is first for got in events)


def test_a_watch_behind_the_window_is_gone(
    service: ObjectService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed, "WINDOW_BYTES", 4096)
    rv = service.resource_version()
    behind = service.watch(WIDGETS, None, resource_version=rv)
    for n in range(20):
        service.create(WIDGETS, "default", widget(f"w{n}", labels={"pad": "x" * 60}))
    with pytest.raises(GoneError, match="too old resource version"):
        behind.next(1)
    with pytest.raises(GoneError):
        service.watch(WIDGETS, None, resource_version=rv)
    recent = str(int(service.resource_version()) - 2)
    assert [
        e.object["metadata"]["name"]
        for e in service.watch(WIDGETS, None, resource_version=recent).next(1)
    ] == ["w18", "w19"]


def test_a_reopened_store_fills_the_window_again(tmp_path: Path) -> None:
    service = make_service(tmp_path)
    rv = service.resource_version()
    service.create(WIDGETS, "default", widget("a"))
    service.close()
    reopened = make_service(tmp_path)
    try:
        events = reopened.watch(WIDGETS, None, resource_version=rv).next(1)
        assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "a")]
    finally:
        reopened.close()


def test_a_first_list_comes_a_page_at_a_time(
    service: ObjectService, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(5):
        service.create(WIDGETS, "default", widget(f"w{n}"))
    monkeypatch.setattr(feed, "PAGE_BYTES", 1)
    watch = service.watch(WIDGETS, None, resource_version=None)
    service.create(WIDGETS, "default", widget("later"))
    pages = [watch.next(1) for _ in range(6)]
    assert [[(e.type, e.object["metadata"]["name"]) for e in page] for page in pages] == [
        *([("ADDED", f"w{n}")] for n in range(5)),
        [("ADDED", "later")],
    ]


def test_a_watch_sees_what_another_process_committed_in_order(tmp_path: Path) -> None:
    here, there = make_service(tmp_path), make_service(tmp_path)
    try:
        watch = here.watch(WIDGETS, "default", resource_version=here.resource_version())
        there.create(WIDGETS, "default", widget("from-there"))
        seen = [e.object["metadata"]["name"] for e in watch.next(5)]
        assert seen == ["from-there"]
        there.create(WIDGETS, "default", widget("there-again"))
        here.create(WIDGETS, "default", widget("from-here"))  # delivers the other's first
        names = []
        while len(names) < 2:
            names += [e.object["metadata"]["name"] for e in watch.next(5)]
        assert names == ["there-again", "from-here"]
        watch.close()
    finally:
        here.close()
        there.close()
