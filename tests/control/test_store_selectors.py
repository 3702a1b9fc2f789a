"""Label and field selectors: Kubernetes' grammar, its semantics, and refusals."""

from __future__ import annotations

import pytest
from store_support import WIDGETS

from diskferry.control.apiserver.store.selectors import parse_fields
from diskferry.control.errors import BadRequestError
from diskferry.control.resources.core import EVENTS, NAMESPACES, SECRETS
from diskferry.control.resources.labels import label_selector, parse_labels
from diskferry.control.resources.storageclass import STORAGE_CLASSES
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS

LABELS = {"app": "web", "tier": "front", "n": "5"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app in (web, db)", True),
        ("app in (db)", False),
        ("app notin (db,cache)", True),
        ("missing notin (db)", True),
        ("app notin (web)", False),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("tier in (front),!legacy,app", True),
        ("n>4", True),
        ("n<5", False),
        ("empty=", False),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert parse_labels(selector).matches(LABELS) is matches


def test_empty_value_matches_an_empty_label() -> None:
    assert parse_labels("empty=").matches({"empty": ""})


@pytest.mark.parametrize(
    "selector", ["app in web", "app in (web", "=web", "app==web==x", "a b", "-bad-=x", "n>x"]
)
def test_malformed_label_selectors_are_refused(selector: str) -> None:
    with pytest.raises(BadRequestError):
        parse_labels(selector)


def test_prefixed_label_keys() -> None:
    assert parse_labels("diskferry.io/owner=vd1").matches({"diskferry.io/owner": "vd1"})


EVENT = {
    "metadata": {"name": "e1", "namespace": "default"},
    "involvedObject": {"kind": "VirtualDisk", "name": "vd1", "uid": "u1", "namespace": "default"},
    "reason": "Failed",
    "type": "Warning",
    "source": {"component": "diskferry"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("involvedObject.name=vd1", True),
        ("involvedObject.name=vd1,involvedObject.namespace=default,involvedObject.uid=u1", True),
        ("involvedObject.kind=VirtualDisk", True),
        ("involvedObject.kind!=VirtualDisk", False),
        ("metadata.name==e1", True),
        ("metadata.namespace=other", False),
        ("type=Warning,reason=Failed", True),
        ("source=diskferry", True),
        ("involvedObject.fieldPath=", True),
    ],
)
def test_event_field_selectors(selector: str, matches: bool) -> None:
    assert parse_fields(selector, EVENTS).matches(EVENT) is matches


def test_spec_and_status_field_selectors_on_a_kind_with_spec() -> None:
    obj = {"metadata": {"name": "w"}, "spec": {"size": 3}, "status": {"phase": "Ready"}}
    assert parse_fields("spec.size=3,status.phase=Ready", WIDGETS).matches(obj)
    assert not parse_fields("spec.color=red", WIDGETS).matches(obj)


@pytest.mark.parametrize(
    ("selector", "info"),
    [
        ("spec.size=1", SECRETS),
        ("status.phase=Ready", SECRETS),
        ("data.key=x", SECRETS),
        ("involvedObject.name=x", SECRETS),
        ("spec.x[0]=1", WIDGETS),
        ("metadata.labels=x", WIDGETS),
        ("metadata.name", WIDGETS),
        ("status.phase=Ready", None),
    ],
)
def test_unsupported_field_selectors_are_refused(selector: str, info: object) -> None:
    with pytest.raises(BadRequestError):
        parse_fields(selector, info)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("selector", "info", "field"),
    [
        ("spec.foo=x", VIRTUAL_DISKS, "spec.foo"),
        ("spec.persistentVolumeClaim.size=1Gi", VIRTUAL_DISKS, "spec.persistentVolumeClaim.size"),
        ("metadata.name=a,spec.parts=x", WIDGETS, "spec.parts"),
        ("status.phase=Ready", STORAGE_CLASSES, "status.phase"),
        ("provisioner=x", STORAGE_CLASSES, "provisioner"),
    ],
)
def test_a_field_the_kind_does_not_declare_is_named_in_the_400(
    selector: str, info: object, field: str
) -> None:
    with pytest.raises(BadRequestError) as refused:
        parse_fields(selector, info)  # type: ignore[arg-type]
    assert refused.value.message == f"field label not supported: {field}"


@pytest.mark.parametrize(
    ("selector", "info"),
    [
        ("metadata.name=a,metadata.namespace=default", VIRTUAL_DISKS),
        ("status.phase=Ready", VIRTUAL_DISKS),
        ("status.phase=Active", NAMESPACES),
        ("metadata.name=fast", STORAGE_CLASSES),
        ("type=Opaque", SECRETS),
    ],
)
def test_the_fields_each_kind_declares_are_selected_on(selector: str, info: object) -> None:
    assert parse_fields(selector, info).terms  # type: ignore[arg-type]


def test_watch_of_every_kind_selects_on_metadata() -> None:
    assert parse_fields("metadata.name=a", None).matches({"metadata": {"name": "a"}})


def test_secret_type_field_selector() -> None:
    assert parse_fields("type=Opaque", SECRETS).matches({"type": "Opaque"})


def test_a_selector_from_labels_matches_them() -> None:
    text = label_selector({"diskferry.io/owner": "vd1", "app": "web"})
    assert text == "app=web,diskferry.io/owner=vd1"
    assert parse_labels(text).matches({"app": "web", "diskferry.io/owner": "vd1", "x": "y"})
    assert not parse_labels(text).matches({"app": "web"})
