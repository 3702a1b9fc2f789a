"""ClusterSource, the manager's Source over a cluster's API, against the stand-in cluster: the
listing (read a page at a time as its objects are taken), each kind's changes after it, and a
watch that fell behind the changes the API keeps (410 Gone), or a reader that fell behind its
watches (a bounded buffer full), ending the changes so that the manager lists again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from standin_support import StandIn, start_standin

from diskferry.control.errors import GoneError
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.runtime.source import Changes
from diskferry.kube import api as kube_api
from diskferry.kube.api import KubeApi
from diskferry.kube.config import api_client
from diskferry.kube.owned import OWNED, SELECTORS
from diskferry.kube.pods import WORKERS
from diskferry.kube.source import ClusterSource, KindWatches

WAIT_SECONDS = 30
KEEP_CHANGES = 64  # the fewest the stand-in may keep: a watch 64 changes behind is gone


def disk(name: str) -> dict:
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualDisk",
        "metadata": {"name": name},
        "spec": {"persistentVolumeClaim": {"size": "64Mi"}},
    }


def changes_until(changes: Changes, name: str) -> list[str]:
    """The types of the changes seen until one of the VirtualDisk `name`, ending with it."""
    seen: list[str] = []
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for change in changes.next(0.5):
            obj = change.object
            if obj["metadata"]["name"] == name:
                seen.append(change.type)
                return seen
    raise AssertionError(f"no change of {name} in {WAIT_SECONDS} s")


def test_the_listing_and_every_change_after_it(api: KubeApi) -> None:
    api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("listed"))
    source = ClusterSource(api, REGISTRY)
    listing = source.follow([VIRTUAL_DISKS])
    try:
        assert [o["metadata"]["name"] for o in listing.objects] == ["listed"]
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("later"))
        assert changes_until(listing.changes, "later") == ["ADDED"]
        status = {"status": {"phase": "Ready"}}
        api.patch(
            "diskferry.io/v1alpha1", "VirtualDisk", "default", "later", status, subresource="status"
        )
        assert changes_until(listing.changes, "later") == ["MODIFIED"]
        api.delete("diskferry.io/v1alpha1", "VirtualDisk", "default", "later")
        assert changes_until(listing.changes, "later") == ["DELETED"]
    finally:
        listing.changes.close()


def test_a_listing_is_read_a_page_at_a_time_as_its_objects_are_taken(
    api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube_api, "PAGE", 2)
    for n in range(5):
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk(f"paged-{n}"))
    read: list[int] = []
    pages = api.pages

    def counted(*args: Any, **kwargs: Any) -> Iterator[tuple[list[dict], str]]:
        for page in pages(*args, **kwargs):
            read.append(len(page[0]))
            yield page

    monkeypatch.setattr(api, "pages", counted)
    source = ClusterSource(api, REGISTRY)
    listing = source.follow([VIRTUAL_DISKS])
    try:
        objects = iter(listing.objects)
        taken = [next(objects), next(objects)]
        assert read == [2]  # whole objects are held a page at a time, however many there are
        taken += list(objects)
        assert len(read) >= 3 and sum(read) == len(taken)
        assert {f"paged-{n}" for n in range(5)} <= {o["metadata"]["name"] for o in taken}
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("after-pages"))
        assert changes_until(listing.changes, "after-pages") == ["ADDED"]
    finally:
        listing.changes.close()
    read.clear()
    resynced = iter(source.list(VIRTUAL_DISKS))
    first = next(resynced)
    assert read == [2]
    assert len([first, *resynced]) == len(taken) + 1  # and after-pages


def test_a_watch_resumes_where_each_request_ended(api: KubeApi) -> None:
    source = ClusterSource(api, REGISTRY, watch_seconds=1)
    listing = source.follow([VIRTUAL_DISKS])
    seen: list[tuple[str, str]] = []
    try:
        for n in range(3):
            api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk(f"resumed-{n}"))
            assert changes_until(listing.changes, f"resumed-{n}") == ["ADDED"]
            seen += [(c.type, c.object["metadata"]["name"]) for c in listing.changes.next(1.5)]
    finally:
        listing.changes.close()
    assert seen == []  # each change once, across requests that ended meanwhile


@pytest.fixture(scope="module")
def compacting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandIn]:
    """A stand-in that keeps few changes, as an etcd compacted often."""
    base = tmp_path_factory.mktemp("compacting")
    started = start_standin(
        base / "data", base / "standin.log", "--keep-changes", str(KEEP_CHANGES)
    )
    yield started
    assert started.stop() == 0


def test_a_watch_too_far_behind_ends_with_gone_and_a_new_listing_goes_on(
    compacting: StandIn, tmp_path: Path
) -> None:
    api = KubeApi(api_client(compacting.kubeconfig), discovery_cache=tmp_path / "discovery")
    source = ClusterSource(api, REGISTRY, watch_seconds=1)
    listing = source.follow([VIRTUAL_DISKS])
    api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("before"))
    assert changes_until(listing.changes, "before") == ["ADDED"]
    # changes the disks' watch does not see, until those after its last one are no longer kept:
    # when its request ends, it asks again from a resourceVersion the API answers 410 Gone
    for n in range(3 * KEEP_CHANGES):
        api.create("v1", "Secret", "default", {"metadata": {"name": f"churn-{n}"}})
    deadline = time.monotonic() + WAIT_SECONDS
    with pytest.raises(GoneError):
        while time.monotonic() < deadline:
            listing.changes.next(0.5)
    listing.changes.close()
    again = source.follow([VIRTUAL_DISKS])
    try:
        assert [o["metadata"]["name"] for o in again.objects] == ["before"]
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("after"))
        assert changes_until(again.changes, "after") == ["ADDED"]
    finally:
        again.changes.close()


def test_a_reader_slower_than_the_changes_holds_a_bounded_buffer_then_lists_again(
    api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="diskferry.kube")
    source = ClusterSource(api, REGISTRY, buffer=4)
    listing = source.follow([VIRTUAL_DISKS])
    watches = listing.changes
    assert isinstance(watches, KindWatches)
    listed = {o["metadata"]["name"] for o in listing.objects}
    outran = {f"outran-{n}" for n in range(12)}
    for name in sorted(outran):
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk(name))
    held: list[int] = []

    def dropped() -> bool:
        held.append(watches.held())
        return "outran their reader" in caplog.text

    wait_until(dropped, WAIT_SECONDS, step=0.1)
    assert max(held) <= 4 and watches.held() == 4
    with pytest.raises(GoneError, match="changes of virtualdisks outran their reader"):
        watches.next(0)
    watches.close()
    again = source.follow([VIRTUAL_DISKS])
    try:
        assert {o["metadata"]["name"] for o in again.objects} == listed | outran
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("after-outran"))
        assert changes_until(again.changes, "after-outran") == ["ADDED"]
    finally:
        again.changes.close()


def _pod(name: str, labels: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "localhost/none"}]},
    }


def test_an_owned_kind_is_listed_and_watched_through_its_selector_alone(api: KubeApi) -> None:
    """The operator follows the worker Pods for their owners, never the cluster's other Pods."""
    api.create("v1", "Pod", "default", _pod("worker-1", WORKERS))
    api.create("v1", "Pod", "default", _pod("someone-elses-1", {"app": "web"}))
    pods = next(info for info in OWNED if info.kind == "Pod")
    listing = ClusterSource(api, REGISTRY, selectors=SELECTORS).follow([pods])
    try:
        assert [o["metadata"]["name"] for o in listing.objects] == ["worker-1"]
        api.create("v1", "Pod", "default", _pod("someone-elses-2", {"app": "web"}))
        api.create("v1", "Pod", "default", _pod("worker-2", WORKERS))
        seen: list[str] = []
        wait_until(
            lambda: (
                seen.extend(c.object["metadata"]["name"] for c in listing.changes.next(0.2))
                or "worker-2" in seen
            ),
            WAIT_SECONDS,
        )
        assert set(seen) == {"worker-2"}  # added, then scheduled: never the other Pod
    finally:
        listing.changes.close()
