"""ClusterSource, the manager's Source over a cluster's API, against the stand-in cluster: the
listing (read a page at a time as its objects are taken), each kind's changes after it, and a
watch that fell behind the changes the API keeps (410 Gone), or a reader that fell behind its
watches (a bounded buffer full), naming the kind that lost its changes so that the manager
lists it alone again, the other kinds' changes going on."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from control_support import wait_until
from standin_support import StandIn, start_standin

from diskferry.control.resources.core import SECRETS
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS
from diskferry.control.runtime.source import Changes, KindsGone
from diskferry.kube import api as kube_api
from diskferry.kube import source as kube_source
from diskferry.kube.api import Backoff, KubeApi
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


def _secret(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}


def _names(changes: Changes, timeout: float) -> list[str]:
    return [c.object["metadata"]["name"] for c in changes.next(timeout)]


def test_a_watch_too_far_behind_names_its_kind_alone_and_the_others_go_on(
    compacting: StandIn, tmp_path: Path
) -> None:
    api = KubeApi(api_client(compacting.kubeconfig), discovery_cache=tmp_path / "discovery")
    listing = ClusterSource(api, REGISTRY, watch_seconds=1).follow([VIRTUAL_DISKS, SECRETS])
    changes = listing.changes
    try:
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("before"))
        assert changes_until(changes, "before") == ["ADDED"]
        # changes the disks' watch does not see, until those after its last one are no longer
        # kept: when its request ends, it asks again from a resourceVersion the API answers 410
        # Gone; the Secrets' watch sees them all
        churn = [f"churn-{n}" for n in range(3 * KEEP_CHANGES)]
        for name in churn:
            api.create("v1", "Secret", "default", _secret(name))
        seen: list[str] = []
        deadline = time.monotonic() + WAIT_SECONDS
        with pytest.raises(KindsGone, match="the watch of virtualdisks expired") as gone:
            while time.monotonic() < deadline:
                seen += _names(changes, 0.5)
        assert gone.value.kinds == (VIRTUAL_DISKS,)
        wait_until(lambda: seen.extend(_names(changes, 0.2)) or set(churn) <= set(seen))
        assert sorted(seen) == sorted(churn)  # each once, the Secrets never listed again
        assert [o["metadata"]["name"] for o in changes.relist(gone.value.kinds)] == ["before"]
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk("after"))
        assert changes_until(changes, "after") == ["ADDED"]
    finally:
        changes.close()


def _create_disks(api: KubeApi, names: list[str]) -> None:
    for name in names:
        api.create("diskferry.io/v1alpha1", "VirtualDisk", "default", disk(name))


def _outran(caplog: pytest.LogCaptureFixture, times: int) -> None:
    """Wait until a full buffer made a kind lose its changes `times` times."""
    wait_until(lambda: caplog.text.count("outran their reader") >= times, WAIT_SECONDS, step=0.1)


def test_a_reader_slower_than_the_changes_holds_a_bounded_buffer_then_lists_the_kind_again(
    api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("WARNING", logger="diskferry.kube")
    source = ClusterSource(api, REGISTRY, buffer=4)
    listing = source.follow([VIRTUAL_DISKS])
    watches = listing.changes
    assert isinstance(watches, KindWatches)
    listed = {o["metadata"]["name"] for o in listing.objects}
    outran = {f"outran-{n}" for n in range(12)}
    _create_disks(api, sorted(outran))
    held: list[int] = []

    def dropped() -> bool:
        held.append(watches.held())
        return "outran their reader" in caplog.text

    wait_until(dropped, WAIT_SECONDS, step=0.1)
    # never more than the buffer, and the changes the new listing supersedes are let go
    assert max(held) <= 4 and watches.held() == 0
    with pytest.raises(KindsGone, match="changes of virtualdisks outran their reader") as gone:
        watches.next(0)
    assert gone.value.kinds == (VIRTUAL_DISKS,)
    try:
        assert {o["metadata"]["name"] for o in watches.relist(gone.value.kinds)} == listed | outran
        _create_disks(api, ["after-outran"])
        assert changes_until(watches, "after-outran") == ["ADDED"]
    finally:
        watches.close()


def test_a_full_buffer_lists_again_the_kind_that_filled_it_alone(
    api: KubeApi, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level("WARNING", logger="diskferry.kube")
    listed_kinds: list[str] = []
    pages = api.pages

    def recorded(api_version: str, kind: str, *args: Any, **kwargs: Any) -> Iterator:
        listed_kinds.append(kind)
        return pages(api_version, kind, *args, **kwargs)

    monkeypatch.setattr(api, "pages", recorded)
    watches = ClusterSource(api, REGISTRY, buffer=4).follow([VIRTUAL_DISKS, SECRETS]).changes
    assert isinstance(watches, KindWatches)
    try:
        api.create("v1", "Secret", "default", _secret("quiet-0"))
        wait_until(lambda: watches.held() == 1, WAIT_SECONDS)
        _create_disks(api, [f"busy-{n}" for n in range(8)])  # the disks fill the buffer
        _outran(caplog, 1)
        listed_kinds.clear()
        with pytest.raises(KindsGone) as gone:
            watches.next(0)
        assert gone.value.kinds == (VIRTUAL_DISKS,)
        # the Secrets' change held stays, and their watch goes on without a listing
        assert [c.object["metadata"]["name"] for c in watches.next(0)] == ["quiet-0"]
        assert {f"busy-{n}" for n in range(8)} <= {
            o["metadata"]["name"] for o in watches.relist(gone.value.kinds)
        }
        api.create("v1", "Secret", "default", _secret("quiet-1"))
        _create_disks(api, ["busy-after"])
        seen: list[str] = []
        wait_until(
            lambda: (
                seen.extend(c.object["metadata"]["name"] for c in watches.next(0.2))
                or {"quiet-1", "busy-after"} <= set(seen)
            ),
            WAIT_SECONDS,
        )
        assert seen.count("quiet-1") == 1 and "quiet-0" not in seen
        assert listed_kinds == ["VirtualDisk"]
    finally:
        watches.close()


def test_a_kind_that_keeps_overflowing_waits_to_be_listed_again_while_the_others_go_on(
    api: KubeApi, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level("WARNING", logger="diskferry.kube")
    monkeypatch.setattr(kube_source, "RELISTS", Backoff(first=3600.0, most=3600.0))
    watches = ClusterSource(api, REGISTRY, buffer=4).follow([VIRTUAL_DISKS, SECRETS]).changes
    assert isinstance(watches, KindWatches)
    try:
        _create_disks(api, [f"flood-{n}" for n in range(6)])
        _outran(caplog, 1)
        with pytest.raises(KindsGone) as gone:  # the first loss: listed again at once
            watches.next(0)
        list(watches.relist(gone.value.kinds))
        _create_disks(api, [f"flood-again-{n}" for n in range(6)])
        _outran(caplog, 2)
        api.create("v1", "Secret", "default", _secret("still-served"))
        seen: list[str] = []
        wait_until(
            lambda: (
                seen.extend(c.object["metadata"]["name"] for c in watches.next(0.2))
                or "still-served" in seen
            ),
            WAIT_SECONDS,
        )  # and the disks, which lost theirs again soon after their listing, were not named
        waits = [r.args[-1] for r in caplog.records if "outran" in r.getMessage()]
        assert waits[0] == 0 and waits[1] >= 1800
    finally:
        watches.close()


def _pod(name: str, labels: dict[str, str]) -> dict:
    """A Pod bound to a node that is none, so that neither the stand-in's scheduler nor its
    kubelet changes it once made."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "localhost/none"}]},
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
        assert set(seen) == {"worker-2"}  # never the other Pod
    finally:
        listing.changes.close()
