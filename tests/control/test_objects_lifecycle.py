"""ObjectService lifecycles: finalizers, garbage collection, namespaces, dry runs, patches."""

from __future__ import annotations

from pathlib import Path

import pytest
from store_support import WIDGETS, make_service, widget

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    UnsupportedMediaTypeError,
)
from diskferry.control.resources.core import NAMESPACES, SECRETS


@pytest.fixture
def service(tmp_path: Path) -> ObjectService:
    svc = make_service(tmp_path)
    yield svc
    svc.close()


def owned_by(owner: dict, name: str, **meta: object) -> dict:
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    return widget(name, ownerReferences=[ref], **meta)


def exists(service: ObjectService, name: str, namespace: str = "default") -> bool:
    try:
        service.get(WIDGETS, namespace, name)
    except NotFoundError:
        return False
    return True


def test_finalizers_hold_the_object_until_removed(service: ObjectService) -> None:
    service.create(WIDGETS, "default", widget("w", finalizers=["diskferry.io/cleanup"]))
    service.clock.advance(5)
    marked = service.delete(WIDGETS, "default", "w")
    assert marked["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:05Z"
    assert service.get(WIDGETS, "default", "w") == marked
    again = service.delete(WIDGETS, "default", "w")
    assert again == marked
    with pytest.raises(InvalidError, match="no new finalizers"):
        service.update(
            WIDGETS,
            "default",
            "w",
            marked
            | {"metadata": marked["metadata"] | {"finalizers": ["x", "diskferry.io/cleanup"]}},
        )
    status, _ = service.update(
        WIDGETS, "default", "w", marked | {"status": {"phase": "Terminating"}}, subresource="status"
    )
    assert status["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    released = status | {"metadata": status["metadata"] | {"finalizers": []}}
    gone, _ = service.update(WIDGETS, "default", "w", released)
    assert gone["metadata"]["name"] == "w"
    assert not exists(service, "w")


def test_finalizer_removed_by_patch_deletes(service: ObjectService) -> None:
    service.create(WIDGETS, "default", widget("w", finalizers=["a", "b"]))
    service.delete(WIDGETS, "default", "w")
    service.patch(
        WIDGETS, "default", "w", [{"op": "remove", "path": "/metadata/finalizers/0"}], "json"
    )
    assert service.get(WIDGETS, "default", "w")["metadata"]["finalizers"] == ["b"]
    service.patch(WIDGETS, "default", "w", {"metadata": {"finalizers": None}}, "merge")
    assert not exists(service, "w")


def test_background_deletion_collects_dependents(service: ObjectService) -> None:
    owner, _ = service.create(WIDGETS, "default", widget("owner"))
    child, _ = service.create(WIDGETS, "default", owned_by(owner, "child"))
    service.create(WIDGETS, "default", owned_by(child, "grandchild"))
    service.create(WIDGETS, "default", widget("bystander"))
    service.delete(WIDGETS, "default", "owner")
    assert [exists(service, n) for n in ("owner", "child", "grandchild", "bystander")] == [
        False,
        False,
        False,
        True,
    ]


def test_dependents_wait_for_an_owner_held_by_finalizers(service: ObjectService) -> None:
    owner, _ = service.create(WIDGETS, "default", widget("owner", finalizers=["f"]))
    service.create(WIDGETS, "default", owned_by(owner, "child"))
    marked = service.delete(WIDGETS, "default", "owner")
    assert exists(service, "child")
    service.update(
        WIDGETS, "default", "owner", marked | {"metadata": marked["metadata"] | {"finalizers": []}}
    )
    assert not exists(service, "child")


def test_dependent_with_another_live_owner_loses_only_that_reference(
    service: ObjectService,
) -> None:
    first, _ = service.create(WIDGETS, "default", widget("first"))
    second, _ = service.create(WIDGETS, "default", widget("second"))
    body = owned_by(first, "child")
    body["metadata"]["ownerReferences"] += owned_by(second, "x")["metadata"]["ownerReferences"]
    service.create(WIDGETS, "default", body)
    service.delete(WIDGETS, "default", "first")
    refs = service.get(WIDGETS, "default", "child")["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["second"]
    service.delete(WIDGETS, "default", "second")
    assert not exists(service, "child")


def test_dependent_finalizers_are_honoured(service: ObjectService) -> None:
    owner, _ = service.create(WIDGETS, "default", widget("owner"))
    service.create(WIDGETS, "default", owned_by(owner, "child", finalizers=["f"]))
    service.delete(WIDGETS, "default", "owner")
    child = service.get(WIDGETS, "default", "child")
    assert child["metadata"]["deletionTimestamp"]


def test_orphan_deletion_keeps_dependents(service: ObjectService) -> None:
    owner, _ = service.create(WIDGETS, "default", widget("owner"))
    service.create(WIDGETS, "default", owned_by(owner, "child"))
    service.delete(WIDGETS, "default", "owner", propagation="Orphan")
    assert "ownerReferences" not in service.get(WIDGETS, "default", "child")["metadata"]


def test_foreground_deletion_waits_for_dependents(service: ObjectService) -> None:
    owner, _ = service.create(WIDGETS, "default", widget("owner"))
    service.create(WIDGETS, "default", owned_by(owner, "held", finalizers=["f"]))
    service.create(WIDGETS, "default", owned_by(owner, "free"))
    marked = service.delete(WIDGETS, "default", "owner", propagation="Foreground")
    assert marked["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert not exists(service, "free")
    held = service.get(WIDGETS, "default", "held")
    assert held["metadata"]["deletionTimestamp"]
    assert exists(service, "owner")
    service.patch(WIDGETS, "default", "held", {"metadata": {"finalizers": None}}, "merge")
    assert not exists(service, "held")
    assert not exists(service, "owner")


def test_cross_kind_garbage_collection(service: ObjectService) -> None:
    owner, _ = service.create(WIDGETS, "default", widget("vd"))
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": "Widget",
        "name": "vd",
        "uid": owner["metadata"]["uid"],
    }
    body = {
        "metadata": {"name": "export-token-vd", "ownerReferences": [ref]},
        "stringData": {"token": "t"},
    }
    service.create(SECRETS, "default", body)
    service.delete(WIDGETS, "default", "vd")
    with pytest.raises(NotFoundError):
        service.get(SECRETS, "default", "export-token-vd")


def test_deleting_a_namespace_deletes_its_objects(service: ObjectService) -> None:
    service.create(NAMESPACES, None, {"metadata": {"name": "team"}})
    service.create(WIDGETS, "team", widget("a"))
    service.create(SECRETS, "team", {"metadata": {"name": "s"}})
    service.create(WIDGETS, "default", widget("a"))
    service.delete(NAMESPACES, None, "team")
    with pytest.raises(NotFoundError):
        service.get(NAMESPACES, None, "team")
    assert service.list(WIDGETS, "team").items == []
    assert service.list(SECRETS, "team").items == []
    assert exists(service, "a", "default")


def test_a_namespace_terminates_until_its_last_object_goes(service: ObjectService) -> None:
    service.create(NAMESPACES, None, {"metadata": {"name": "team"}})
    service.create(WIDGETS, "team", widget("held", finalizers=["f"]))
    ns = service.delete(NAMESPACES, None, "team")
    assert ns["status"]["phase"] == "Terminating"
    assert ns["metadata"]["deletionTimestamp"]
    with pytest.raises(ForbiddenError, match="being terminated"):
        service.create(WIDGETS, "team", widget("new"))
    service.patch(WIDGETS, "team", "held", {"metadata": {"finalizers": None}}, "merge")
    with pytest.raises(NotFoundError):
        service.get(NAMESPACES, None, "team")


def test_dry_run_writes_nothing(service: ObjectService) -> None:
    rv = service.resource_version()
    created, _ = service.create(WIDGETS, "default", widget("w"), dry_run=True)
    assert created["metadata"]["uid"]
    with pytest.raises(NotFoundError):
        service.get(WIDGETS, "default", "w")
    assert service.resource_version() == rv
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    rv = service.resource_version()
    watch = service.watch(WIDGETS, None, resource_version=rv)
    changed, _ = service.update(WIDGETS, "default", "w", obj | {"spec": {"size": 7}}, dry_run=True)
    assert changed["spec"]["size"] == 7
    service.patch(WIDGETS, "default", "w", {"spec": {"size": 8}}, "merge", dry_run=True)
    service.delete(WIDGETS, "default", "w", dry_run=True)
    assert service.get(WIDGETS, "default", "w") == obj
    assert service.resource_version() == rv
    assert watch.next(timeout=0.05) == []


def test_merge_patch_through_the_service(service: ObjectService) -> None:
    service.create(WIDGETS, "default", widget("w", labels={"a": "1"}))
    patched, _ = service.patch(
        WIDGETS,
        "default",
        "w",
        b'{"spec": {"color": "red"}, "metadata": {"labels": {"a": null, "b": "2"}}}',
        "merge",
    )
    assert patched["spec"] == {"size": 1, "color": "red", "parts": []}
    assert patched["metadata"]["labels"] == {"b": "2"}
    assert patched["metadata"]["generation"] == 2


def test_patch_status_subresource_changes_only_status(service: ObjectService) -> None:
    service.create(WIDGETS, "default", widget("w"))
    body = {"status": {"phase": "Ready"}, "spec": {"size": 5}}
    patched, _ = service.patch(WIDGETS, "default", "w", body, "merge", subresource="status")
    assert patched["status"]["phase"] == "Ready"
    assert patched["spec"]["size"] == 1
    main, _ = service.patch(WIDGETS, "default", "w", {"status": {"phase": "Failed"}}, "merge")
    assert main["status"]["phase"] == "Ready"


def test_patch_with_a_stale_resource_version_conflicts(service: ObjectService) -> None:
    obj, _ = service.create(WIDGETS, "default", widget("w"))
    service.patch(WIDGETS, "default", "w", {"spec": {"size": 2}}, "merge")
    stale = {
        "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
        "spec": {"size": 3},
    }
    with pytest.raises(ConflictError):
        service.patch(WIDGETS, "default", "w", stale, "merge")


def test_patch_result_is_validated(service: ObjectService) -> None:
    service.create(WIDGETS, "default", widget("w"))
    with pytest.raises(InvalidError, match=r"spec\.size"):
        service.patch(WIDGETS, "default", "w", {"spec": {"size": "huge"}}, "merge")


def test_strategic_patch_refused_for_custom_kinds_taken_for_core_kinds(
    service: ObjectService,
) -> None:
    service.create(WIDGETS, "default", widget("w"))
    with pytest.raises(UnsupportedMediaTypeError):
        service.patch(WIDGETS, "default", "w", {"spec": {"size": 2}}, "strategic")
    service.create(
        SECRETS,
        "default",
        {"metadata": {"name": "s", "finalizers": ["a"]}, "stringData": {"k": "v"}},
    )
    patched, _ = service.patch(
        SECRETS,
        "default",
        "s",
        {"metadata": {"finalizers": ["b"]}, "stringData": {"j": "w"}},
        "strategic",
    )
    assert patched["metadata"]["finalizers"] == ["a", "b"]
    assert sorted(patched["data"]) == ["j", "k"]


def test_foreground_deletion_leaves_a_dependent_with_another_owner(service: ObjectService) -> None:
    owner, _ = service.create(WIDGETS, "default", widget("owner"))
    other, _ = service.create(WIDGETS, "default", widget("other"))
    body = owned_by(owner, "shared")
    body["metadata"]["ownerReferences"] += owned_by(other, "x")["metadata"]["ownerReferences"]
    service.create(WIDGETS, "default", body)
    service.delete(WIDGETS, "default", "owner", propagation="Foreground")
    assert not exists(service, "owner")
    refs = service.get(WIDGETS, "default", "shared")["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["other"]
