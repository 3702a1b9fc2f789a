"""Fields with no effect here: every write that sets one to other than its default answers a
warning naming the field and why, in the service's warnings and the API's Warning headers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import Field
from store_support import NOT_PAINTED, WIDGETS, make_service, widget

from diskferry.control.apiserver.http.app import ApiServer
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.model import ApiModel
from diskferry.control.resources.noeffect import no_effect, warnings

WARNING = f"spec.color: has no effect here: {NOT_PAINTED}"
TOKEN = "noeffect-token"
WIDGETS_PATH = "/apis/diskferry.io/v1alpha1/namespaces/default/widgets"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ObjectService]:
    svc = make_service(tmp_path)
    yield svc
    svc.close()


def _painted(name: str, color: str) -> dict:
    body = widget(name)
    body["spec"]["color"] = color
    return body


def test_create_warns_for_a_field_set_and_not_for_one_left_out(service: ObjectService) -> None:
    _, painted = service.create(WIDGETS, "default", _painted("a", "red"))
    assert painted == [WARNING]
    _, plain = service.create(WIDGETS, "default", widget("b"))
    assert plain == []


def test_update_patch_and_apply_warn_when_they_set_the_field(service: ObjectService) -> None:
    service.create(WIDGETS, "default", widget("a"))
    current = service.get(WIDGETS, "default", "a")
    current["spec"]["color"] = "red"
    _, updated = service.update(WIDGETS, "default", "a", current)
    assert updated == [WARNING]
    _, patched = service.patch(
        WIDGETS, "default", "a", b'{"spec": {"color": "blue"}}', "application/merge-patch+json"
    )
    assert patched == [WARNING]
    _, applied, _ = service.apply(WIDGETS, "default", "a", _painted("a", "green"), "ssa")
    assert applied == [WARNING]
    _, created, _ = service.apply(WIDGETS, "default", "new", _painted("new", "green"), "ssa")
    assert created == [WARNING]


def test_writes_that_leave_the_field_as_it_was_do_not_warn(service: ObjectService) -> None:
    service.create(WIDGETS, "default", _painted("a", "red"))
    _, resized = service.patch(
        WIDGETS, "default", "a", b'{"spec": {"size": 2}}', "application/merge-patch+json"
    )
    assert resized == []
    current = service.get(WIDGETS, "default", "a")
    current["status"] = {"phase": "Ready"}
    _, status = service.update(WIDGETS, "default", "a", current, subresource="status")
    assert status == []
    _, cleared = service.patch(
        WIDGETS, "default", "a", b'{"spec": {"color": null}}', "application/merge-patch+json"
    )
    assert cleared == []


class Part(ApiModel):
    """A part of a test assembly."""

    finish: str = no_effect("no finish is applied", "The part's finish.", default="matte")


class Assembly(ApiModel):
    """A test assembly with parts in a list and in a map."""

    parts: list[Part] = Field(default_factory=list, description="The parts in order.")
    spares: dict[str, Part] = Field(default_factory=dict, alias="sparesByName", description="x")


def test_fields_in_lists_and_maps_are_named_by_their_path() -> None:
    assembly = Assembly.model_validate(
        {
            "parts": [{"finish": "matte"}, {"finish": "gloss"}],
            "sparesByName": {"left": {"finish": "satin"}},
        }
    )
    new = assembly.to_json()
    assert warnings(assembly, new, None) == [
        "parts[1].finish: has no effect here: no finish is applied",
        "sparesByName[left].finish: has no effect here: no finish is applied",
    ]
    old = {"parts": [{"finish": "matte"}, {"finish": "gloss"}]}
    assert warnings(assembly, new, old) == [
        "sparesByName[left].finish: has no effect here: no finish is applied"
    ]


@pytest.fixture
def client(service: ObjectService) -> Iterator[TestClient]:
    api = ApiServer(service, service.registry, TOKEN, "127.0.0.1:7443")
    with TestClient(api.app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c
    api.close()


def _warnings(answer: object) -> list[str]:
    return answer.headers.get_list("warning")  # type: ignore[attr-defined]


def test_the_api_answers_each_as_a_warning_header(client: TestClient) -> None:
    expected = [f'299 - "{WARNING}"']
    created = client.post(WIDGETS_PATH, json=_painted("a", "red"))
    assert created.status_code == 201 and _warnings(created) == expected
    merge = {"Content-Type": "application/merge-patch+json"}
    patched = client.patch(
        f"{WIDGETS_PATH}/a", content=b'{"spec": {"color": "blue"}}', headers=merge
    )
    assert patched.status_code == 200 and _warnings(patched) == expected
    body = patched.json()
    body["spec"]["color"] = "green"
    updated = client.put(f"{WIDGETS_PATH}/a", json=body)
    assert updated.status_code == 200 and _warnings(updated) == expected
    applied = client.patch(
        f"{WIDGETS_PATH}/a",
        content=yaml.safe_dump(_painted("a", "white")),
        headers={"Content-Type": "application/apply-patch+yaml"},
        params={"fieldManager": "me", "force": "true"},
    )
    assert applied.status_code == 200 and _warnings(applied) == expected
    unknown = _painted("b", "red")
    unknown["spec"]["bogus"] = 1
    both = client.post(WIDGETS_PATH, json=unknown, params={"fieldValidation": "Warn"})
    assert both.status_code == 201
    assert _warnings(both) == ["299 - \"unknown field 'spec.bogus'\"", *expected]
    assert _warnings(client.post(WIDGETS_PATH, json=widget("c"))) == []
