"""ObjectService basics: create, get, list, update, status, delete and watch, as Kubernetes."""

from __future__ import annotations

import base64
import stat
import threading
from pathlib import Path

import pytest
from store_support import WIDGETS, make_service, widget

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
)
from diskferry.control.resources.core import EVENTS, NAMESPACES, SECRETS


@pytest.fixture
def service(tmp_path: Path) -> ObjectService:
    svc = make_service(tmp_path)
    yield svc
    svc.close()


def secret(name: str, **meta: object) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, **meta}}


def test_default_namespace_exists_and_state_file_is_private(
    service: ObjectService, tmp_path: Path
) -> None:
    ns = service.get(NAMESPACES, None, "default")
    assert ns["status"]["phase"] == "Active"
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600


def test_create_sets_server_fields(service: ObjectService) -> None:
    before = int(service.resource_version())
    obj, warnings = service.create(WIDGETS, "default", widget("w1", 3))
    meta = obj["metadata"]
    assert warnings == []
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert int(meta["resourceVersion"]) == before + 1 == int(service.resource_version())
    assert len(meta["uid"]) == 36
    assert meta["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert service.get(WIDGETS, "default", "w1") == obj


def test_create_ignores_given_status_and_refuses_given_resource_version(
    service: ObjectService,
) -> None:
    body = widget("w1") | {"status": {"phase": "Ready"}}
    obj, _ = service.create(WIDGETS, "default", body)
    assert obj["status"].get("phase") is None
    with pytest.raises(BadRequestError):
        service.create(WIDGETS, "default", widget("w2", resourceVersion="5"))


def test_create_twice_is_already_exists(service: ObjectService) -> None:
    service.create(SECRETS, "default", secret("s"))
    with pytest.raises(AlreadyExistsError, match='secrets "s" already exists'):
        service.create(SECRETS, "default", secret("s"))


def test_create_needs_an_existing_namespace(service: ObjectService) -> None:
    with pytest.raises(NotFoundError, match='namespaces "nope" not found'):
        service.create(SECRETS, "nope", secret("s"))
    service.create(NAMESPACES, None, {"metadata": {"name": "nope"}})
    obj, _ = service.create(SECRETS, "nope", secret("s"))
    assert obj["metadata"]["namespace"] == "nope"


def test_namespace_in_body_must_match_the_request(service: ObjectService) -> None:
    service.create(NAMESPACES, None, {"metadata": {"name": "other"}})
    with pytest.raises(BadRequestError):
        service.create(SECRETS, "default", secret("s", namespace="other"))
    obj, _ = service.create(SECRETS, None, secret("s", namespace="other"))
    assert obj["metadata"]["namespace"] == "other"


def test_kind_and_api_version_must_match(service: ObjectService) -> None:
    with pytest.raises(BadRequestError):
        service.create(SECRETS, "default", {"apiVersion": "v2", "metadata": {"name": "s"}})
    with pytest.raises(BadRequestError):
        service.create(SECRETS, "default", {"kind": "Event", "metadata": {"name": "s"}})


def test_invalid_and_unknown_fields(service: ObjectService) -> None:
    with pytest.raises(InvalidError, match=r"spec\.size"):
        service.create(WIDGETS, "default", widget("w") | {"spec": {"size": "big"}})
    body = widget("w") | {"spec": {"size": 2, "shape": "round"}}
    with pytest.raises(InvalidError, match=r"spec\.shape"):
        service.create(WIDGETS, "default", body)
    obj, warnings = service.create(WIDGETS, "default", body, field_validation="Warn")
    assert warnings == ['unknown field "spec.shape"']
    assert "shape" not in obj["spec"]


def test_generate_name(service: ObjectService) -> None:
    body = {"metadata": {"generateName": "tok-"}}
    names = {service.create(SECRETS, "default", body)[0]["metadata"]["name"] for _ in range(5)}
    assert len(names) == 5
    assert all(name.startswith("tok-") and len(name) == 9 for name in names)
    with pytest.raises(InvalidError, match=r"metadata\.name"):
        service.create(SECRETS, "default", {"metadata": {}})


def test_secret_string_data_is_folded(service: ObjectService) -> None:
    body = secret("s") | {"data": {"a": base64.b64encode(b"x").decode()}, "stringData": {"b": "y"}}
    obj, _ = service.create(SECRETS, "default", body)
    assert "stringData" not in obj
    assert obj["data"] == {"a": "eA==", "b": base64.b64encode(b"y").decode()}
    assert service.get(SECRETS, "default", "s")["data"] == obj["data"]


def test_get_missing(service: ObjectService) -> None:
    with pytest.raises(NotFoundError, match=r'widgets\.diskferry\.io "x" not found'):
        service.get(WIDGETS, "default", "x")


def test_update_bumps_generation_only_on_spec_change(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w", 1))
    obj["metadata"]["labels"] = {"a": "b"}
    labelled, _ = service.update(WIDGETS, "default", "w", obj)
    assert labelled["metadata"]["generation"] == 1
    assert int(labelled["metadata"]["resourceVersion"]) > int(obj["metadata"]["resourceVersion"])
    labelled["spec"]["size"] = 2
    resized, _ = service.update(WIDGETS, "default", "w", labelled)
    assert resized["metadata"]["generation"] == 2
    assert resized["metadata"]["uid"] == obj["metadata"]["uid"]
    assert resized["metadata"]["creationTimestamp"] == obj["metadata"]["creationTimestamp"]


def test_update_that_changes_nothing_writes_nothing(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    again, _ = service.update(WIDGETS, "default", "w", obj)
    assert again == obj
    assert service.resource_version() == obj["metadata"]["resourceVersion"]


def test_stale_resource_version_is_a_conflict(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    service.update(WIDGETS, "default", "w", obj | {"spec": {"size": 5}})
    with pytest.raises(ConflictError, match="the object has been modified"):
        service.update(WIDGETS, "default", "w", obj | {"spec": {"size": 6}})
    assert service.get(WIDGETS, "default", "w")["spec"]["size"] == 5


def test_update_name_must_match(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    obj["metadata"]["name"] = "other"
    with pytest.raises(BadRequestError):
        service.update(WIDGETS, "default", "w", obj)
    with pytest.raises(NotFoundError):
        service.update(WIDGETS, "default", "other", obj)


def test_concurrent_updates_have_one_winner(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    results: list[str] = []
    start = threading.Barrier(8)

    def attempt(size: int) -> None:
        start.wait()
        try:
            service.update(WIDGETS, "default", "w", obj | {"spec": {"size": size}})
            results.append("won")
        except ConflictError:
            results.append("conflict")

    threads = [threading.Thread(target=attempt, args=(n + 10,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["conflict"] * 7 + ["won"]
    assert service.get(WIDGETS, "default", "w")["metadata"]["generation"] == 2


def test_status_subresource(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    changed = obj | {"spec": {"size": 9}, "status": {"phase": "Ready", "progress": "50%"}}
    stored, _ = service.update(WIDGETS, "default", "w", changed, subresource="status")
    assert stored["status"] == {"phase": "Ready", "progress": "50%", "conditions": []}
    assert stored["spec"]["size"] == 1
    assert stored["metadata"]["generation"] == 1
    main = stored | {"status": {"phase": "Failed"}, "spec": {"size": 2}}
    updated, _ = service.update(WIDGETS, "default", "w", main)
    assert updated["status"]["phase"] == "Ready"
    assert updated["spec"]["size"] == 2
    with pytest.raises(NotFoundError):
        service.update(SECRETS, "default", "s", secret("s"), subresource="status")


def test_list_by_namespace_and_across(service: ObjectService) -> None:
    service.create(NAMESPACES, None, {"metadata": {"name": "b"}})
    service.create(SECRETS, "default", secret("z"))
    service.create(SECRETS, "b", secret("a"))
    service.create(SECRETS, "default", secret("m"))
    everywhere = service.list(SECRETS, None)
    keys = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in everywhere.items]
    assert keys == [("b", "a"), ("default", "m"), ("default", "z")]
    assert everywhere.resource_version == service.resource_version()
    assert everywhere.continue_token is None
    names = [o["metadata"]["name"] for o in service.list(SECRETS, "default").items]
    assert names == ["m", "z"]
    assert [o["metadata"]["name"] for o in service.list(NAMESPACES, None).items] == ["b", "default"]


def test_delete_without_finalizers(service: ObjectService) -> None:
    service.create(SECRETS, "default", secret("s"))
    gone = service.delete(SECRETS, "default", "s")
    assert gone["metadata"]["name"] == "s"
    with pytest.raises(NotFoundError):
        service.get(SECRETS, "default", "s")
    with pytest.raises(NotFoundError):
        service.delete(SECRETS, "default", "s")


def test_delete_preconditions(service: ObjectService) -> None:
    obj, _ = service.create(SECRETS, "default", secret("s"))
    with pytest.raises(ConflictError):
        service.delete(SECRETS, "default", "s", uid_precondition="other")
    with pytest.raises(ConflictError):
        service.delete(SECRETS, "default", "s", rv_precondition="1")
    service.delete(SECRETS, "default", "s", uid_precondition=obj["metadata"]["uid"])


def test_default_namespace_cannot_be_deleted(service: ObjectService) -> None:
    with pytest.raises(ForbiddenError):
        service.delete(NAMESPACES, None, "default")


def test_watch_from_a_resource_version(service: ObjectService) -> None:
    first, _ = service.create(SECRETS, "default", secret("a"))
    rv = first["metadata"]["resourceVersion"]
    service.create(SECRETS, "default", secret("b"))
    service.update(SECRETS, "default", "a", first | {"type": "x"})
    service.create(WIDGETS, "default", widget("w"))
    service.delete(SECRETS, "default", "b")
    watch = service.watch(SECRETS, "default", resource_version=rv)
    events = watch.next(timeout=1)
    seen = [(e.type, e.object["metadata"]["name"]) for e in events]
    assert seen == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert watch.next(timeout=0.05) == []
    watch.close()


def test_watch_without_version_lists_first_then_follows(service: ObjectService) -> None:
    service.create(SECRETS, "default", secret("a"))
    watch = service.watch(SECRETS, None, resource_version=None)
    assert [(e.type, e.object["metadata"]["name"]) for e in watch.next(1)] == [("ADDED", "a")]
    got: list[list] = []
    waiter = threading.Thread(target=lambda: got.append(watch.next(timeout=30)))
    waiter.start()
    service.create(SECRETS, "default", secret("b"))
    waiter.join()
    assert [(e.type, e.object["metadata"]["name"]) for e in got[0]] == [("ADDED", "b")]
    assert watch.bookmark().object["metadata"]["resourceVersion"] == service.resource_version()
    watch.close()


def test_watch_close_wakes_a_blocked_next(service: ObjectService) -> None:
    watch = service.watch(SECRETS, None, resource_version=service.resource_version())
    got: list[list] = []
    waiter = threading.Thread(target=lambda: got.append(watch.next(timeout=60)))
    waiter.start()
    watch.close()
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    assert got == [[]]


def test_closing_the_service_ends_its_watches(tmp_path: Path) -> None:
    svc = make_service(tmp_path)
    watch = svc.watch(SECRETS, None, resource_version=svc.resource_version())
    got: list[list] = []
    waiter = threading.Thread(target=lambda: got.append(watch.next(timeout=60)))
    waiter.start()
    svc.close()
    waiter.join(timeout=10)
    assert got == [[]]
    assert watch.next(timeout=1) == []


def test_an_immutable_secret_keeps_its_data(service: ObjectService) -> None:
    obj, _ = service.create(SECRETS, "default", secret("s") | {"immutable": True})
    with pytest.raises(InvalidError, match="immutable"):
        service.update(SECRETS, "default", "s", obj | {"data": {"k": "dg=="}})
    with pytest.raises(InvalidError, match="immutable"):
        service.patch(SECRETS, "default", "s", {"immutable": False}, "merge")
    labelled, _ = service.patch(
        SECRETS, "default", "s", {"metadata": {"labels": {"a": "b"}}}, "merge"
    )
    assert labelled["metadata"]["labels"] == {"a": "b"}


def test_watch_every_kind(service: ObjectService) -> None:
    rv = service.resource_version()
    service.create(SECRETS, "default", secret("a"))
    service.create(WIDGETS, "default", widget("w"))
    watch = service.watch(None, None, resource_version=rv)
    assert [e.object["kind"] for e in watch.next(1)] == ["Secret", "Widget"]


def test_state_survives_a_reopen(tmp_path: Path) -> None:
    first = make_service(tmp_path)
    obj, _ = first.create(SECRETS, "default", secret("s"))
    first.close()
    second = make_service(tmp_path)
    assert second.get(SECRETS, "default", "s") == obj
    assert second.resource_version() == obj["metadata"]["resourceVersion"]
    watch = second.watch(SECRETS, None, resource_version="1")
    assert [e.type for e in watch.next(1)] == ["ADDED"]
    second.close()


def test_events_are_counted(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    first = service.record_event(obj, "Normal", "Started", "import started", "diskferry")
    assert first["count"] == 1
    assert first["involvedObject"]["uid"] == obj["metadata"]["uid"]
    assert first["firstTimestamp"] == first["lastTimestamp"] == "2026-01-01T00:00:00Z"
    service.clock.advance(30)
    again = service.record_event(obj, "Normal", "Started", "import started", "diskferry")
    assert again["metadata"]["name"] == first["metadata"]["name"]
    assert again["count"] == 2
    assert again["lastTimestamp"] == "2026-01-01T00:00:30Z"
    assert again["firstTimestamp"] == first["firstTimestamp"]
    other = service.record_event(obj, "Warning", "Failed", "HTTP 404", "diskferry")
    assert other["metadata"]["name"] != first["metadata"]["name"]
    assert len(service.list(EVENTS, "default").items) == 2


def test_old_events_expire(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    service.record_event(obj, "Normal", "Old", "first", "diskferry")
    service.clock.advance(1800)
    service.record_event(obj, "Normal", "Recent", "second", "diskferry")
    service.clock.advance(1801)
    assert service.expire_events() == 1
    assert [e["reason"] for e in service.list(EVENTS, "default").items] == ["Recent"]
