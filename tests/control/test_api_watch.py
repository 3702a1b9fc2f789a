"""Watch streams over a real store: events after a resourceVersion, tables, 410 as ERROR."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from api_support import TOKEN, VD, client, disk, server
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http import watch
from diskferry.control.apiserver.http.app import ApiServer
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.apiserver.store.db import TRIM_EVERY
from diskferry.control.errors import TooManyRequestsError
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VIRTUAL_DISKS

__all__ = ["client", "server"]


def _events(client: TestClient, path: str, **params: object) -> list[dict]:
    with client.stream("GET", path, params={"watch": "true", **params}) as answer:
        assert answer.status_code == 200
        return [json.loads(line) for line in answer.iter_lines() if line]


def test_watch_from_resource_version(client: TestClient) -> None:
    first = client.post(VD, json=disk("a")).json()
    rv = first["metadata"]["resourceVersion"]
    client.post(VD, json=disk("b"))
    client.delete(f"{VD}/a")
    events = _events(client, VD, resourceVersion=rv, timeoutSeconds=1)
    seen = [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert seen == [("ADDED", "b"), ("DELETED", "a")]


def test_watch_without_version_lists_first(client: TestClient) -> None:
    client.post(VD, json=disk("a"))
    events = _events(client, VD, timeoutSeconds=1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]


def test_watch_of_one_object_as_table(client: TestClient) -> None:
    rv = client.post(VD, json=disk("a")).json()["metadata"]["resourceVersion"]
    client.post(VD, json=disk("b"))
    client.patch(
        f"{VD}/a",
        content='{"metadata":{"labels":{"x":"y"}}}',
        headers={"Content-Type": "application/merge-patch+json"},
    )
    with client.stream(
        "GET",
        f"{VD}/a",
        params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": 1},
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    ) as answer:
        events = [json.loads(line) for line in answer.iter_lines() if line]
    assert [e["type"] for e in events] == ["MODIFIED"]
    assert events[0]["object"]["kind"] == "Table"
    assert events[0]["object"]["rows"][0]["cells"][0] == "a"


def test_too_old_is_410_error_event(tmp_path: Path) -> None:
    service = ObjectService(tmp_path / "state.db", REGISTRY, keep_changes=1)
    for i in range(TRIM_EVERY + 1):
        service.create(VIRTUAL_DISKS, "default", disk(f"d{i}"))
    api = ApiServer(service, REGISTRY, TOKEN, "127.0.0.1:7443")
    try:
        with TestClient(api.app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
            events = _events(c, VD, resourceVersion="1", timeoutSeconds=1)
    finally:
        api.close()
        service.close()
    assert [e["type"] for e in events] == ["ERROR"]
    status = events[0]["object"]
    assert status["kind"] == "Status" and status["code"] == 410 and status["reason"] == "Expired"


def test_bad_selector_is_400(client: TestClient) -> None:
    answer = client.get(
        VD, params={"watch": "true", "labelSelector": "a in (", "timeoutSeconds": 1}
    )
    assert answer.status_code == 400
    assert answer.json()["kind"] == "Status"


def test_bookmarks_when_allowed(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "BOOKMARK_SECONDS", 0.0)
    rv = client.post(VD, json=disk("a")).json()["metadata"]["resourceVersion"]
    allowed = _events(client, VD, resourceVersion=rv, timeoutSeconds=1, allowWatchBookmarks="true")
    assert allowed and {e["type"] for e in allowed} == {"BOOKMARK"}
    assert allowed[-1]["object"]["metadata"]["resourceVersion"] == rv
    assert allowed[-1]["object"]["kind"] == "VirtualDisk"
    assert _events(client, VD, resourceVersion=rv, timeoutSeconds=1) == []


def test_watches_are_bounded_per_client_and_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "MAX_WATCHES", 3)
    monkeypatch.setattr(watch, "MAX_WATCHES_PER_CLIENT", 2)
    service = ObjectService(tmp_path / "state.db", REGISTRY)
    watcher = watch.Watcher()

    def start() -> object:
        return service.watch(VIRTUAL_DISKS, None, resource_version=service.resource_version())

    async def open_from(client: str) -> object:
        return await watcher.response(start, None, client=client, timeout=1, bookmarks=False)

    async def scenario() -> list[str]:
        refusals = []
        first = await open_from("a")
        await open_from("a")
        for address in ("a", "b", "c"):
            try:
                await open_from(address)
            except TooManyRequestsError as error:
                assert error.retry_after == 1
                refusals.append(address)
        first.done()
        await open_from("c")
        return refusals

    try:
        assert asyncio.run(scenario()) == ["a", "c"]
        assert watcher.open == 3 and dict(watcher.by_client) == {"a": 1, "b": 1, "c": 1}
    finally:
        watcher.close()
        service.close()
