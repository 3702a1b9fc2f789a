"""EmbeddedClient over the real store: typed objects, None for missing ones, labels, stale
updates refused, status merged, deletes of what is gone, and events bumped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from store_support import WIDGETS, Widget, make_service, widget

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import ConflictError
from diskferry.control.resources.core import EVENTS
from diskferry.control.runtime.client import EmbeddedClient, selector


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[ObjectService]:
    service = make_service(tmp_path)
    yield service
    service.close()


@pytest.fixture
def client(objects) -> EmbeddedClient:
    return EmbeddedClient(objects, objects.registry)


def test_get_list_create_update_and_delete(client, objects) -> None:
    assert client.get(Widget, "default", "w") is None
    made = client.create(Widget.model_validate(widget("w", labels={"tier": "gold"})))
    assert isinstance(made, Widget) and made.metadata.uid
    client.create(Widget.model_validate(widget("v", labels={"tier": "lead"})))
    assert [w.metadata.name for w in client.list(Widget, "default", {"tier": "gold"})] == ["w"]
    assert len(client.list(Widget)) == 2
    changed = made.model_copy(update={"spec": made.spec.model_copy(update={"size": 5})})
    updated = client.update(changed)
    assert updated.spec.size == 5 and updated.metadata.generation == 2
    with pytest.raises(ConflictError):
        client.update(changed)  # made from the stale resourceVersion
    client.delete(Widget, "default", "w")
    client.delete(Widget, "default", "w")  # gone already: nothing
    assert client.get(Widget, "default", "w") is None


def test_patch_status_merges(client) -> None:
    made = client.create(Widget.model_validate(widget("s")))
    client.patch_status(made, {"phase": "Pending", "progress": "1%"})
    after = client.patch_status(made, {"progress": "2%"})
    assert (after.status.phase, after.status.progress) == ("Pending", "2%")
    cleared = client.patch_status(after, {"progress": None})
    assert cleared.status.progress is None and cleared.status.phase == "Pending"


def test_events_are_recorded_and_bumped(client, objects) -> None:
    made = client.create(Widget.model_validate(widget("e")))
    for _ in range(2):
        client.event(made, "Warning", "Broken", "it broke")
    [event] = objects.list(EVENTS, "default").items
    assert (event["reason"], event["message"], event["count"]) == ("Broken", "it broke", 2)
    assert event["involvedObject"]["uid"] == made.metadata.uid
    assert event["source"]["component"] == "diskferry-controller"


def test_selector_and_kind_of_a_model(client) -> None:
    assert selector(None) is None and selector({}) is None
    assert selector({"b": "2", "a": "1"}) == "a=1,b=2"
    assert client.info(Widget) is WIDGETS
