"""The manager over the real store: watches queue objects and their owners, one reconcile of a
key at a time, errors shown as a condition and an Event and retried, requeue-after, resync,
a kind whose changes were lost listed again alone (what it lost found by the listing), and a
stop that waits for the reconciles under way."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from store_support import COMPLETE, WIDGETS, Widget, make_service, widget

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.core import EVENTS, SECRETS
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.control.runtime.conditions import set_condition
from diskferry.control.runtime.manager import Manager, ObjectKey, fingerprint
from diskferry.control.runtime.reconciler import Result
from diskferry.control.runtime.source import Change, Changes, KindsGone, Listing, StoreSource


class Widgets:
    """A reconciler of widgets that counts its calls and does what the test tells it."""

    info = WIDGETS

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.failures: dict[str, int] = {}
        self.requeues: dict[str, int] = {}
        self.pause = 0.0
        self.gate: threading.Barrier | None = None
        self.threads: set[str] = set()
        self.active: Counter[str] = Counter()
        self.overlapped: list[str] = []
        self.finished: list[str] = []
        self._lock = threading.Lock()

    def reconcile(self, obj: Widget) -> Result:
        name = obj.metadata.name or ""
        with self._lock:
            self.calls[name] += 1
            self.active[name] += 1
            if self.active[name] > 1:
                self.overlapped.append(name)
            self.threads.add(threading.current_thread().name)
        try:
            time.sleep(self.pause)
            if self.gate is not None:
                self.gate.wait()
            if self.failures.get(name, 0) > 0:
                self.failures[name] -= 1
                raise RuntimeError(f"{name} is broken\nsecond line")
            if self.requeues.get(name, 0) > 0:
                self.requeues[name] -= 1
                return Result.requeue(0.01)
            return Result.done()
        finally:
            with self._lock:
                self.active[name] -= 1
                self.finished.append(name)


@pytest.fixture
def objects(tmp_path: Path) -> Iterator[ObjectService]:
    service = make_service(tmp_path)
    yield service
    service.close()


@pytest.fixture
def run(objects) -> Iterator:
    managers: list[Manager] = []

    def start(reconciler: Widgets, **options) -> Manager:
        client = EmbeddedClient(objects, objects.registry)
        manager = Manager(StoreSource(objects), client, [reconciler], **options)
        manager.start()
        managers.append(manager)
        return manager

    yield start
    for manager in managers:
        manager.stop()


def _create(objects: ObjectService, name: str, **meta) -> dict:
    return objects.create(WIDGETS, "default", widget(name, **meta))[0]


def test_objects_there_at_start_and_created_later_are_reconciled(objects, run) -> None:
    _create(objects, "before")
    widgets = Widgets()
    run(widgets)
    wait_until(lambda: widgets.calls["before"] >= 1)
    _create(objects, "after")
    wait_until(lambda: widgets.calls["after"] >= 1)


def test_an_error_is_a_condition_and_an_event_and_is_retried(objects, run) -> None:
    widgets = Widgets()
    widgets.failures["w"] = 3
    run(widgets)
    _create(objects, "w")
    wait_until(lambda: widgets.calls["w"] >= 4)  # three failures, then success
    events = [
        e for e in objects.list(EVENTS, "default").items if e["involvedObject"]["name"] == "w"
    ]
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [
        ("Warning", "ReconcileError", "RuntimeError: w is broken")
    ]
    assert events[0]["count"] == 3
    condition = wait_until(
        lambda: next(
            (
                c
                for c in objects.get(WIDGETS, "default", "w")["status"].get("conditions", [])
                if c["type"] == "Reconciled" and c["status"] == "True"
            ),
            None,
        )
    )
    assert condition["reason"] == "Reconciled"


class CompletesThenFails(Widgets):
    """Writes the condition Complete, then fails (as a reconcile whose Event write failed)."""

    def __init__(self, client: EmbeddedClient) -> None:
        super().__init__()
        self.client = client

    def reconcile(self, obj: Widget) -> Result:
        conditions = set_condition(obj, [], COMPLETE, True, "Completed", "done")
        self.client.patch_status(obj, {"conditions": conditions})
        self.calls[obj.metadata.name or ""] += 1
        raise RuntimeError("the Event could not be written")


def test_an_error_keeps_the_conditions_the_reconcile_wrote(objects, run) -> None:
    widgets = CompletesThenFails(EmbeddedClient(objects, objects.registry))
    run(widgets)
    _create(objects, "w")
    wait_until(lambda: widgets.calls["w"] >= 2)

    def conditions() -> dict[str, str]:
        found = objects.get(WIDGETS, "default", "w")["status"].get("conditions", [])
        return {c["type"]: c["status"] for c in found}

    wait_until(lambda: conditions().get("Reconciled") == "False")
    assert conditions() == {"Complete": "True", "Reconciled": "False"}


def manager_key(name: str) -> ObjectKey:
    return ObjectKey("Widget", "default", name)


def test_a_failing_key_backs_off_while_others_go_on(objects, run) -> None:
    widgets = Widgets()
    widgets.failures["bad"] = 1_000_000
    manager = run(widgets)
    _create(objects, "bad")
    wait_until(lambda: manager.queue.backoff.failures(manager_key("bad")) >= 5)
    _create(objects, "good")
    wait_until(lambda: widgets.calls["good"] >= 1)
    # every call failed and was counted into the key's backoff; the good key has none
    assert manager.queue.backoff.failures(manager_key("bad")) >= widgets.calls["bad"] - 1
    assert manager.queue.backoff.failures(manager_key("good")) == 0
    condition = objects.get(WIDGETS, "default", "bad")["status"]["conditions"][0]
    assert (condition["type"], condition["status"]) == ("Reconciled", "False")
    assert condition["message"] == "RuntimeError: bad is broken"


def test_a_key_is_reconciled_once_at_a_time_however_often_it_changes(objects, run) -> None:
    widgets = Widgets()
    widgets.pause = 0.02
    run(widgets, workers=4)
    _create(objects, "busy")
    wait_until(lambda: widgets.calls["busy"] >= 1)  # the changes below come after it began
    for n in range(30):
        objects.patch(WIDGETS, "default", "busy", {"spec": {"size": n + 2}}, "merge")
    wait_until(lambda: widgets.calls["busy"] >= 2)
    time.sleep(0.2)
    assert widgets.overlapped == []
    assert widgets.calls["busy"] < 31  # changes that came while one ran were folded


def test_reconciles_of_different_keys_run_on_the_workers_at_once(objects, run) -> None:
    widgets = Widgets()
    # each of four reconciles waits until all four are under way: one thread would never get on
    widgets.gate = threading.Barrier(4, timeout=60)
    run(widgets, workers=4)
    for n in range(4):
        _create(objects, f"w{n}")
    wait_until(lambda: len(widgets.finished) >= 4)
    assert not widgets.gate.broken
    assert len(widgets.threads) == 4


def test_what_is_kept_of_an_object_does_not_grow_with_its_annotations() -> None:
    small = widget("w", annotations={"note": "x"})
    large = widget("w", annotations={"note": "x" * 1_000_000})
    assert len(fingerprint(large)) == len(fingerprint(small)) <= 32
    assert fingerprint(large) != fingerprint(small)


def test_a_changed_child_queues_its_owner(objects, run) -> None:
    widgets = Widgets()
    run(widgets)
    parent = _create(objects, "parent")
    owner = {
        "apiVersion": parent["apiVersion"],
        "kind": "Widget",
        "name": "parent",
        "uid": parent["metadata"]["uid"],
    }
    wait_until(lambda: widgets.calls["parent"] >= 1)
    before = widgets.calls["parent"]
    _create(objects, "child", ownerReferences=[owner])
    wait_until(lambda: widgets.calls["parent"] > before)


def test_requeue_after_and_resync_reconcile_again_without_a_change(objects, run) -> None:
    widgets = Widgets()
    widgets.requeues["again"] = 3
    run(widgets, resync=0.3)
    _create(objects, "again")
    wait_until(lambda: widgets.calls["again"] >= 4)  # the requeues
    settled = widgets.calls["again"]
    wait_until(lambda: widgets.calls["again"] > settled)  # a resync


def test_a_resync_expires_the_events_of_an_hour_ago(objects, run) -> None:
    involved = _create(objects, "noisy")
    objects.record_event(involved, "Normal", "Old", "long ago", "test")
    objects.clock.advance(3601)
    objects.record_event(involved, "Normal", "New", "just now", "test")
    run(Widgets(), resync=0.2)
    wait_until(lambda: [e["reason"] for e in objects.list(EVENTS, "default").items] == ["New"])


def test_stop_waits_for_the_reconcile_under_way(objects, run) -> None:
    widgets = Widgets()
    widgets.pause = 0.5
    manager = run(widgets)
    _create(objects, "slow")
    wait_until(lambda: widgets.calls["slow"] >= 1)
    manager.stop()
    assert widgets.finished == ["slow"]
    _create(objects, "late")
    time.sleep(0.2)
    assert widgets.calls["late"] == 0


def _patch_status(objects: ObjectService, name: str, progress: str) -> None:
    status = {"status": {"progress": progress}}
    objects.patch(WIDGETS, "default", name, status, "merge", subresource="status")


def _after_a_marker(objects: ObjectService, widgets: Widgets, marker: str) -> None:
    """Wait until a new widget `marker` was reconciled: with one worker, whatever the watch
    queued before it was reconciled before it."""
    _create(objects, marker)
    wait_until(lambda: widgets.calls[marker] >= 1)


def test_a_status_change_of_the_object_itself_does_not_queue_it(objects, run) -> None:
    widgets = Widgets()
    run(widgets, workers=1)
    _create(objects, "w")
    _after_a_marker(objects, widgets, "m0")
    before = widgets.calls["w"]
    for n in range(20):
        _patch_status(objects, "w", f"{n}%")
    _after_a_marker(objects, widgets, "m1")
    assert widgets.calls["w"] == before


@pytest.mark.parametrize(
    "change",
    [
        {"spec": {"size": 7}},
        {"metadata": {"labels": {"a": "b"}}},
        {"metadata": {"annotations": {"a": "b"}}},
        {"metadata": {"finalizers": ["diskferry.io/test"]}},
    ],
    ids=["generation", "labels", "annotations", "finalizers"],
)
def test_a_change_of_generation_or_metadata_queues_the_object(objects, run, change) -> None:
    widgets = Widgets()
    run(widgets, workers=1)
    _create(objects, "w")
    _after_a_marker(objects, widgets, "m0")
    before = widgets.calls["w"]
    objects.patch(WIDGETS, "default", "w", change, "merge")
    wait_until(lambda: widgets.calls["w"] > before)


def test_a_deletion_queues_the_object(objects, run) -> None:
    widgets = Widgets()
    run(widgets, workers=1)
    _create(objects, "w", finalizers=["diskferry.io/test"])
    _after_a_marker(objects, widgets, "m0")
    before = widgets.calls["w"]
    objects.delete(WIDGETS, "default", "w")
    wait_until(lambda: widgets.calls["w"] > before)


def test_a_status_change_of_a_child_still_queues_its_owner(objects, run) -> None:
    widgets = Widgets()
    run(widgets, workers=1)
    parent = _create(objects, "parent")
    owner = {
        "apiVersion": parent["apiVersion"],
        "kind": "Widget",
        "name": "parent",
        "uid": parent["metadata"]["uid"],
    }
    _create(objects, "child", ownerReferences=[owner])
    _after_a_marker(objects, widgets, "m0")
    before = widgets.calls["parent"]
    _patch_status(objects, "child", "50%")
    wait_until(lambda: widgets.calls["parent"] > before)


def _pointed_at(obj: dict) -> list[tuple[str, str | None, str]]:
    """The widget a widget's spec.color names."""
    color = obj["spec"].get("color")
    return [("Widget", "default", color)] if color else []


def test_a_change_of_an_object_queues_what_it_bears_on_before_and_after(objects, run) -> None:
    widgets = Widgets()
    run(widgets, workers=1, related={"Widget": _pointed_at})
    _create(objects, "first")
    _create(objects, "second")
    objects.create(WIDGETS, "default", {**widget("pointer"), "spec": {"color": "first"}})
    _after_a_marker(objects, widgets, "m0")
    before = dict(widgets.calls)
    _patch_status(objects, "pointer", "50%")  # bears on first: queues it
    _after_a_marker(objects, widgets, "m1")
    assert widgets.calls["first"] == before["first"] + 1
    assert widgets.calls["second"] == before["second"]
    objects.patch(WIDGETS, "default", "pointer", {"spec": {"color": "second"}}, "merge")
    _after_a_marker(objects, widgets, "m2")
    assert widgets.calls["first"] == before["first"] + 2  # the one it bore on before
    assert widgets.calls["second"] == before["second"] + 1


class Losing:
    """The store's changes, but those of the kinds told are dropped until they are listed
    again, and named lost when told (as a cluster's watch of a kind that fell behind)."""

    def __init__(self, changes: Changes, objects: ObjectService) -> None:
        self.changes = changes
        self.objects = objects
        self.dropping: dict[str, KindInfo] = {}
        self.named = threading.Event()
        self.relisted: list[list[str]] = []

    def next(self, timeout: float) -> list[Change]:
        if self.named.is_set():
            self.named.clear()
            raise KindsGone("lost", list(self.dropping.values()))
        changes = self.changes.next(timeout)
        return [c for c in changes if c.object.get("kind") not in self.dropping]

    def relist(self, kinds: Sequence[KindInfo]) -> list[dict[str, Any]]:
        self.relisted.append([info.kind for info in kinds])
        for info in kinds:
            self.dropping.pop(info.kind)
        return [obj for info in kinds for obj in self.objects.list(info, None).items]

    def close(self) -> None:
        self.changes.close()


class LosingSource(StoreSource):
    """The store as a source whose changes are Losing."""

    def follow(self, kinds: Sequence[KindInfo]) -> Listing:
        listing = super().follow(kinds)
        self.changes = Losing(listing.changes, self.objects)
        return Listing(listing.objects, self.changes)


def test_a_kind_whose_changes_were_lost_is_listed_again_alone_and_its_deletions_found(
    objects: ObjectService,
) -> None:
    widgets = Widgets()
    source = LosingSource(objects)
    client = EmbeddedClient(objects, objects.registry)
    manager = Manager(source, client, [widgets], workers=1, owned=[SECRETS])
    manager.start()
    try:
        parent = _create(objects, "parent")
        _create(objects, "bystander")
        owner = {
            "apiVersion": parent["apiVersion"],
            "kind": "Widget",
            "name": "parent",
            "uid": parent["metadata"]["uid"],
        }
        child = {"metadata": {"name": "child", "ownerReferences": [owner]}}
        objects.create(SECRETS, "default", child)
        _after_a_marker(objects, widgets, "m0")
        before = dict(widgets.calls)
        source.changes.dropping[SECRETS.kind] = SECRETS
        objects.delete(SECRETS, "default", "child")  # a deletion the manager does not hear of
        source.changes.named.set()
        wait_until(lambda: widgets.calls["parent"] > before["parent"])
        _after_a_marker(objects, widgets, "m1")
        assert source.changes.relisted == [["Secret"]]
        assert widgets.calls["bystander"] == before["bystander"]  # its kind was not listed
    finally:
        manager.stop()
