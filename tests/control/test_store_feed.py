"""The change feed: watches resumed, filtered and expired; lists continued on one snapshot."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from store_support import WIDGETS, make_service, widget

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.apiserver.store.db import TRIM_EVERY, Database, StoreError
from diskferry.control.errors import BadRequestError, GoneError
from diskferry.control.resources.core import SECRETS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def service(tmp_path: Path) -> ObjectService:
    svc = make_service(tmp_path)
    yield svc
    svc.close()


def names(events: list) -> list[tuple[str, str]]:
    return [(e.type, e.object["metadata"]["name"]) for e in events]


def test_a_watch_resumes_where_it_stopped(service: ObjectService) -> None:
    rv = service.resource_version()
    for n in range(6):
        service.create(WIDGETS, "default", widget(f"w{n}"))
    watch = service.watch(WIDGETS, None, resource_version=rv)
    first = watch.next(1)[:3]
    watch.close()
    resumed = service.watch(
        WIDGETS, None, resource_version=first[-1].object["metadata"]["resourceVersion"]
    )
    assert names(resumed.next(1)) == [("ADDED", f"w{n}") for n in range(3, 6)]


def test_a_watch_from_a_trimmed_version_is_gone(tmp_path: Path) -> None:
    service = make_service(tmp_path, keep_changes=10)
    for n in range(TRIM_EVERY):
        service.create(WIDGETS, "default", widget(f"w{n}"))
    with pytest.raises(GoneError, match="too old resource version") as error:
        service.watch(WIDGETS, None, resource_version="3")
    assert error.value.code == 410
    current = int(service.resource_version())
    oldest = TRIM_EVERY - 10
    events = service.watch(WIDGETS, None, resource_version=str(oldest)).next(1)
    assert len(events) == current - oldest
    with pytest.raises(GoneError):
        service.watch(WIDGETS, None, resource_version=str(oldest - 1))
    service.close()


def test_a_watch_that_falls_behind_the_trim_is_gone(tmp_path: Path) -> None:
    service = make_service(tmp_path, keep_changes=10)
    watch = service.watch(WIDGETS, None, resource_version=service.resource_version())
    for n in range(2 * TRIM_EVERY):
        service.create(WIDGETS, "default", widget(f"w{n}"))
    with pytest.raises(GoneError):
        watch.next(1)
    service.close()


def test_bad_resource_version(service: ObjectService) -> None:
    with pytest.raises(BadRequestError):
        service.watch(WIDGETS, None, resource_version="abc")


def test_a_selected_watch_sees_objects_enter_and_leave(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w", labels={"app": "a"}))
    watch = service.watch(WIDGETS, None, resource_version="0", label_selector="app=a")
    assert names(watch.next(1)) == [("ADDED", "w")]
    meta = obj["metadata"]
    service.update(WIDGETS, "default", "w", obj | {"metadata": meta | {"labels": {"app": "b"}}})
    service.patch(WIDGETS, "default", "w", {"spec": {"size": 4}}, "merge")
    service.patch(WIDGETS, "default", "w", {"metadata": {"labels": {"app": "a"}}}, "merge")
    service.patch(WIDGETS, "default", "w", {"spec": {"size": 5}}, "merge")
    service.create(WIDGETS, "default", widget("other", labels={"app": "b"}))
    service.delete(WIDGETS, "default", "w")
    assert names(watch.next(1)) == [
        ("DELETED", "w"),
        ("ADDED", "w"),
        ("MODIFIED", "w"),
        ("DELETED", "w"),
    ]


def test_a_field_selected_watch(service: ObjectService) -> None:
    rv = service.resource_version()
    service.create(WIDGETS, "default", widget("a"))
    service.create(WIDGETS, "default", widget("b"))
    watch = service.watch(WIDGETS, "default", resource_version=rv, field_selector="metadata.name=b")
    assert names(watch.next(1)) == [("ADDED", "b")]


def test_a_watch_wakes_for_a_write_from_another_thread(service: ObjectService) -> None:
    watch = service.watch(SECRETS, None, resource_version=service.resource_version())
    writer = threading.Timer(
        0.05, lambda: service.create(SECRETS, "default", {"metadata": {"name": "s"}})
    )
    writer.start()
    assert names(watch.next(timeout=30)) == [("ADDED", "s")]
    writer.join()


def test_list_with_selectors(service: ObjectService) -> None:
    for n in range(6):
        service.create(
            WIDGETS, "default", widget(f"w{n}", n, labels={"even": str(n % 2 == 0).lower()})
        )
    listed = service.list(
        WIDGETS, "default", label_selector="even=true", field_selector="metadata.name!=w2"
    )
    assert [o["metadata"]["name"] for o in listed.items] == ["w0", "w4"]
    by_spec = service.list(WIDGETS, None, field_selector="spec.size=3")
    assert [o["metadata"]["name"] for o in by_spec.items] == ["w3"]


def test_list_pages_read_one_snapshot(service: ObjectService) -> None:
    for n in range(25):
        service.create(WIDGETS, "default", widget(f"w{n:02d}", n))
    page = service.list(WIDGETS, "default", limit=10)
    assert [o["metadata"]["name"] for o in page.items] == [f"w{n:02d}" for n in range(10)]
    assert page.remaining == 15
    snapshot = page.resource_version
    service.patch(WIDGETS, "default", "w12", {"spec": {"size": 99}}, "merge")
    service.delete(WIDGETS, "default", "w15")
    service.create(WIDGETS, "default", widget("w13a"))
    service.delete(WIDGETS, "default", "w20")
    service.create(WIDGETS, "default", widget("w20"))
    items = list(page.items)
    while page.continue_token:
        page = service.list(WIDGETS, "default", limit=10, continue_token=page.continue_token)
        assert page.resource_version == snapshot
        items.extend(page.items)
    assert [o["metadata"]["name"] for o in items] == [f"w{n:02d}" for n in range(25)]
    assert [o["spec"]["size"] for o in items] == list(range(25))
    fresh = service.list(WIDGETS, "default")
    assert "w13a" in [o["metadata"]["name"] for o in fresh.items]
    assert "w15" not in [o["metadata"]["name"] for o in fresh.items]


def test_list_pages_with_a_selector(service: ObjectService) -> None:
    for n in range(10):
        service.create(WIDGETS, "default", widget(f"w{n}", labels={"odd": str(n % 2)}))
    page = service.list(WIDGETS, None, label_selector="odd=1", limit=3)
    assert [o["metadata"]["name"] for o in page.items] == ["w1", "w3", "w5"]
    rest = service.list(
        WIDGETS, None, label_selector="odd=1", limit=3, continue_token=page.continue_token
    )
    assert [o["metadata"]["name"] for o in rest.items] == ["w7", "w9"]
    assert rest.continue_token is None


def test_an_expired_continue_token_is_gone(tmp_path: Path) -> None:
    service = make_service(tmp_path, keep_changes=10)
    for n in range(5):
        service.create(WIDGETS, "default", widget(f"w{n}"))
    page = service.list(WIDGETS, None, limit=2)
    for n in range(TRIM_EVERY):
        service.patch(WIDGETS, "default", "w0", {"spec": {"size": n + 2}}, "merge")
    with pytest.raises(GoneError, match="continue parameter is too old"):
        service.list(WIDGETS, None, limit=2, continue_token=page.continue_token)
    service.close()


def test_a_limit_of_zero_or_less_lists_everything(service: ObjectService) -> None:
    for n in range(3):
        service.create(WIDGETS, "default", widget(f"w{n}"))
    for limit in (0, -1):
        page = service.list(WIDGETS, None, limit=limit)
        assert len(page.items) == 3
        assert page.continue_token is None


def test_a_bad_continue_token(service: ObjectService) -> None:
    with pytest.raises(BadRequestError):
        service.list(WIDGETS, None, continue_token="not-a-token")


def test_another_schema_version_is_refused(tmp_path: Path) -> None:
    Database(tmp_path / "state.db").close()
    conn = sqlite3.connect(tmp_path / "state.db")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        Database(tmp_path / "state.db")


def test_the_scaled_down_benchmark_selects_and_follows_every_update(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_store",
            "--objects",
            "2000",
            "--updates",
            "1500",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=240,
    )
    results = json.loads(out.stdout)
    assert results["matched"] == results["expected"] == 60
    assert results["paged"] == 2000
    assert results["seen"] == 1500
    assert results["in_order"] is True


def test_writers_on_many_threads_each_get_their_own_resource_version(
    service: ObjectService,
) -> None:
    rv = service.resource_version()
    watch = service.watch(SECRETS, None, resource_version=rv)

    def writer(t: int) -> None:
        for n in range(40):
            service.create(SECRETS, "default", {"metadata": {"name": f"t{t}-{n}"}})

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    seen: list[dict] = []
    while len(seen) < 160:
        events = watch.next(timeout=30)
        assert events
        seen.extend(e.object for e in events)
    for thread in threads:
        thread.join()
    versions = [int(o["metadata"]["resourceVersion"]) for o in seen]
    assert versions == list(range(int(rv) + 1, int(rv) + 161))
    assert len(service.list(SECRETS, "default").items) == 160


def test_connections_of_ended_threads_are_closed(tmp_path: Path) -> None:
    db = Database(tmp_path / "state.db")

    def read() -> None:
        with db.read() as tx:
            tx.current_rv()

    for _ in range(20):
        thread = threading.Thread(target=read)
        thread.start()
        thread.join()
    read()
    assert db.open_connections <= 2
    db.close()
