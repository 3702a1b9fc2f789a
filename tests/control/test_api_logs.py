"""The `log` subresource: the reader's text for an object, 404 as Status otherwise."""

from __future__ import annotations

from typing import Any

from api_support import TOKEN, VD, client, disk, server
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http import logs
from diskferry.control.apiserver.http.app import ApiServer
from diskferry.control.resources.kinds import KindInfo

__all__ = ["client", "server"]


def test_log_is_the_readers_text_as_plain_text(server: ApiServer, client: TestClient) -> None:
    seen: list[tuple[str, str]] = []

    def read(info: KindInfo, obj: dict[str, Any]) -> str | None:
        seen.append((info.kind, obj["metadata"]["uid"]))
        return "fetched 64 MiB\ndone\n" if obj["metadata"]["name"] == "vd1" else None

    logs.install(server, read)
    uid = client.post(VD, json=disk("vd1")).json()["metadata"]["uid"]
    client.post(VD, json=disk("vd2"))
    answer = client.get(f"{VD}/vd1/log")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert answer.text == "fetched 64 MiB\ndone\n"
    assert seen == [("VirtualDisk", uid)]
    assert client.get(f"{VD}/vd1").json()["metadata"]["name"] == "vd1"

    none_yet = client.get(f"{VD}/vd2/log")
    assert none_yet.status_code == 404
    assert none_yet.json()["message"] == (
        'VirtualDisk.diskferry.io "vd2" has no log: no worker has run for it'
    )
    missing = client.get(f"{VD}/vd3/log")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    cluster_scoped = client.get("/apis/diskferry.io/v1alpha1/virtualdisks/vd1/log")
    assert cluster_scoped.status_code == 404
    with TestClient(server.app) as anonymous:
        refused = anonymous.get(f"{VD}/vd1/log")
    assert refused.status_code == 401 and TOKEN not in refused.text
