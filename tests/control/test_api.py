"""The API over a real store: auth, discovery, CRUD, errors as Status, patches, tables, metrics."""

from __future__ import annotations

import json

import pytest
from api_support import SECRETS, TOKEN, VD, client, disk, server
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http import openapiproto
from diskferry.control.apiserver.http.app import ApiServer

__all__ = ["client", "server"]

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
DISCOVERY = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


def test_no_token_is_401_as_status(server: ApiServer) -> None:
    with TestClient(server.app) as anonymous:
        answer = anonymous.get(VD)
        wrong = anonymous.get(VD, headers={"Authorization": "Bearer nope"})
        health = anonymous.get("/healthz")
    assert answer.status_code == 401
    assert answer.json()["kind"] == "Status"
    assert answer.json()["reason"] == "Unauthorized"
    assert wrong.status_code == 401
    assert health.status_code == 200
    assert TOKEN not in answer.text


def test_discovery_plain_and_aggregated(client: TestClient) -> None:
    groups = client.get("/apis").json()
    assert {g["name"] for g in groups["groups"]} == {
        "diskferry.io",
        "storage.k8s.io",
        "authorization.k8s.io",
        "authentication.k8s.io",
    }
    resources = client.get("/apis/diskferry.io/v1alpha1").json()["resources"]
    names = {r["name"]: r for r in resources}
    assert names["virtualdisks"]["shortNames"] == ["vd"]
    assert "virtualdisks/status" in names
    assert client.get("/api").json()["versions"] == ["v1"]
    core = {r["name"] for r in client.get("/api/v1").json()["resources"]}
    assert {"secrets", "events", "namespaces"} <= core

    answer = client.get("/apis", headers={"Accept": DISCOVERY})
    assert answer.headers["content-type"].startswith("application/json;g=apidiscovery.k8s.io;v=v2")
    items = {i["metadata"]["name"]: i for i in answer.json()["items"]}
    vd = next(
        r
        for r in items["diskferry.io"]["versions"][0]["resources"]
        if r["resource"] == "virtualdisks"
    )
    assert vd["scope"] == "Namespaced"
    assert vd["responseKind"] == {
        "group": "diskferry.io",
        "version": "v1alpha1",
        "kind": "VirtualDisk",
    }
    assert vd["subresources"][0]["subresource"] == "status"
    core_v2 = client.get("/api", headers={"Accept": DISCOVERY}).json()
    assert core_v2["items"][0]["versions"][0]["version"] == "v1"
    assert client.get("/version").json()["major"] == "1"


@pytest.mark.parametrize(
    "path",
    ["/version", "/api", "/apis", "/api/v1", "/apis/diskferry.io", "/apis/diskferry.io/v1alpha1"],
)
def test_discovery_with_a_trailing_slash_answers_the_same(client: TestClient, path: str) -> None:
    plain = client.get(path)
    slashed = client.get(f"{path}/")
    assert plain.status_code == slashed.status_code == 200
    assert slashed.json() == plain.json()


def test_version_with_a_trailing_slash_needs_no_token(server: ApiServer) -> None:
    with TestClient(server.app) as anonymous:
        assert anonymous.get("/version/").status_code == 200


def test_create_get_list_update_delete(client: TestClient) -> None:
    created = client.post(VD, json=disk())
    assert created.status_code == 201
    meta = created.json()["metadata"]
    assert meta["namespace"] == "default" and meta["uid"]
    assert client.get(f"{VD}/vd1").json()["spec"]["persistentVolumeClaim"]["size"] == "64Mi"
    listed = client.get(VD).json()
    assert listed["kind"] == "VirtualDiskList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["vd1"]
    everywhere = client.get("/apis/diskferry.io/v1alpha1/virtualdisks").json()
    assert len(everywhere["items"]) == 1

    changed = created.json()
    changed["spec"]["persistentVolumeClaim"]["size"] = "128Mi"
    assert client.put(f"{VD}/vd1", json=changed).status_code == 200
    stale = client.put(f"{VD}/vd1", json=changed)
    assert stale.status_code == 409 and stale.json()["reason"] == "Conflict"

    status = client.get(f"{VD}/vd1").json()
    status["status"] = {"phase": "Ready"}
    assert client.put(f"{VD}/vd1/status", json=status).json()["status"]["phase"] == "Ready"

    assert client.delete(f"{VD}/vd1").status_code == 200
    missing = client.get(f"{VD}/vd1")
    assert missing.status_code == 404
    assert missing.json()["reason"] == "NotFound"


def test_errors_are_status_with_field_path(client: TestClient) -> None:
    bad = disk("bad")
    bad["spec"]["persistentVolumeClaim"]["bogus"] = 1
    answer = client.post(VD, json=bad)
    assert answer.status_code == 422
    body = answer.json()
    assert body["kind"] == "Status" and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "spec.persistentVolumeClaim.bogus"
    assert client.post(VD, json=disk()).status_code == 201
    again = client.post(VD, json=disk())
    assert again.status_code == 409 and again.json()["reason"] == "AlreadyExists"
    other = client.post(VD, json={**disk("x"), "metadata": {"name": "x", "namespace": "other"}})
    assert other.status_code == 400
    assert client.get("/apis/diskferry.io/v1alpha1/nothings").status_code == 404
    assert client.get("/nowhere").json()["kind"] == "Status"
    assert client.post(VD, content=b"{not json").status_code == 400
    assert client.post(VD, json=disk("y"), params={"fieldValidation": "Loud"}).status_code == 400


def test_field_validation_warn_and_dry_run(client: TestClient) -> None:
    extra = disk("warned")
    extra["spec"]["bogus"] = True
    answer = client.post(VD, json=extra, params={"fieldValidation": "Warn"})
    assert answer.status_code == 201
    assert answer.headers.get_list("warning") == ["299 - \"unknown field 'spec.bogus'\""]
    assert "bogus" not in answer.json()["spec"]
    odd = disk("odd")
    odd["spec"]["n\u00e4me\u263a"] = 1  # a header holds latin-1 only: escaped, not a 500
    answer = client.post(VD, json=odd, params={"fieldValidation": "Warn"})
    assert answer.status_code == 201
    assert answer.headers.get_list("warning") == ["299 - \"unknown field 'spec.n\\xe4me\\u263a'\""]

    dry = client.post(VD, json=disk("dry"), params={"dryRun": "All"})
    assert dry.status_code == 201
    assert client.get(f"{VD}/dry").status_code == 404
    assert client.delete(f"{VD}/warned", params={"dryRun": "All"}).status_code == 200
    assert client.get(f"{VD}/warned").status_code == 200


def test_patch_types(client: TestClient) -> None:
    client.post(VD, json=disk())
    merge = client.patch(
        f"{VD}/vd1",
        content=json.dumps({"metadata": {"labels": {"a": "b"}}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert merge.json()["metadata"]["labels"] == {"a": "b"}
    jsonpatch = client.patch(
        f"{VD}/vd1",
        content=json.dumps([{"op": "replace", "path": "/metadata/labels/a", "value": "c"}]),
        headers={"Content-Type": "application/json-patch+json"},
    )
    assert jsonpatch.json()["metadata"]["labels"] == {"a": "c"}
    strategic = client.patch(
        f"{VD}/vd1",
        content="{}",
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert strategic.status_code == 415
    assert strategic.json()["reason"] == "UnsupportedMediaType"
    client.post(SECRETS, json={"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})
    secret = client.patch(
        f"{SECRETS}/s",
        content=json.dumps({"stringData": {"k": "v"}}),
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert secret.status_code == 200 and secret.json()["data"] == {"k": "dg=="}
    unknown = client.patch(f"{VD}/vd1", content="{}", headers={"Content-Type": "text/plain"})
    assert unknown.status_code == 415


def test_server_side_apply_creates_then_merges(client: TestClient) -> None:
    headers = {"Content-Type": "application/apply-patch+yaml"}
    params = {"fieldManager": "kubectl"}
    text = "apiVersion: diskferry.io/v1alpha1\nkind: VirtualDisk\nmetadata: {name: ssa}\n"
    spec = "spec: {persistentVolumeClaim: {size: 64Mi}}\n"
    first = client.patch(f"{VD}/ssa", content=text + spec, headers=headers, params=params)
    assert first.status_code == 201
    labelled = text.replace("{name: ssa}", "{name: ssa, labels: {x: y}}") + spec
    second = client.patch(f"{VD}/ssa", content=labelled, headers=headers, params=params)
    assert second.status_code == 200
    assert second.json()["metadata"]["labels"] == {"x": "y"}
    assert second.json()["metadata"]["uid"] == first.json()["metadata"]["uid"]


def test_table_has_print_columns(client: TestClient) -> None:
    client.post(VD, json=disk())
    status = client.get(f"{VD}/vd1").json()
    status["status"] = {"phase": "Ready", "progress": "100%", "capacity": "64Mi"}
    client.put(f"{VD}/vd1/status", json=status)
    answer = client.get(VD, headers={"Accept": TABLE}).json()
    assert answer["kind"] == "Table" and answer["apiVersion"] == "meta.k8s.io/v1"
    names = [c["name"] for c in answer["columnDefinitions"]]
    assert names[:3] == ["Name", "Phase", "Capacity"] and names[-1] == "Age"
    cells = dict(zip(names, answer["rows"][0]["cells"], strict=True))
    assert cells["Phase"] == "Ready" and cells["Progress"] == "100%"
    assert cells["Age"].endswith("s")
    assert answer["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    one = client.get(f"{VD}/vd1", headers={"Accept": TABLE}, params={"includeObject": "Object"})
    assert one.json()["rows"][0]["object"]["spec"]["persistentVolumeClaim"]["size"] == "64Mi"


def test_list_pages_and_selectors(client: TestClient) -> None:
    for i in range(5):
        body = disk(f"d{i}")
        body["metadata"]["labels"] = {"even": str(i % 2 == 0).lower()}
        client.post(VD, json=body)
    page = client.get(VD, params={"limit": 2}).json()
    assert len(page["items"]) == 2 and page["metadata"]["continue"]
    assert page["metadata"]["remainingItemCount"] == 3
    rest = client.get(VD, params={"continue": page["metadata"]["continue"]}).json()
    assert len(rest["items"]) == 3
    even = client.get(VD, params={"labelSelector": "even=true"}).json()
    assert [i["metadata"]["name"] for i in even["items"]] == ["d0", "d2", "d4"]
    named = client.get(VD, params={"fieldSelector": "metadata.name=d3"}).json()
    assert [i["metadata"]["name"] for i in named["items"]] == ["d3"]
    deleted = client.delete(VD, params={"labelSelector": "even=false"})
    assert len(deleted.json()["items"]) == 2
    assert len(client.get(VD).json()["items"]) == 3


@pytest.mark.parametrize("watch", ["false", "true"])
def test_a_field_selector_the_kind_does_not_support_is_400(client: TestClient, watch: str) -> None:
    client.post(VD, json=disk("d1"))
    params = {"fieldSelector": "spec.foo=x", "watch": watch, "timeoutSeconds": "1"}
    answer = client.get(VD, params=params)
    assert answer.status_code == 400
    assert answer.json()["reason"] == "BadRequest"
    assert answer.json()["message"] == "field label not supported: spec.foo"
    phase = client.get(VD, params={"fieldSelector": "status.phase!=Ready"})
    assert [i["metadata"]["name"] for i in phase.json()["items"]] == ["d1"]


def test_metrics_count_requests_and_objects(client: TestClient) -> None:
    client.post(VD, json=disk())
    client.get(f"{VD}/vd1")
    text = client.get("/metrics").text
    assert 'diskferry_api_requests_total{verb="get",resource="virtualdisks",code="200"} 1' in text
    assert (
        'diskferry_api_requests_total{verb="create",resource="virtualdisks",code="201"} 1' in text
    )
    assert 'diskferry_objects{kind="VirtualDisk.diskferry.io"} 1' in text
    assert "diskferry_api_request_duration_seconds_count" in text


def test_openapi_v3_layout(client: TestClient) -> None:
    index = client.get("/openapi/v3").json()["paths"]
    assert {"api/v1", "apis/diskferry.io/v1alpha1", "apis/storage.k8s.io/v1"} <= set(index)
    url = index["apis/diskferry.io/v1alpha1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/diskferry.io/v1alpha1?hash=")
    doc = client.get(url).json()
    schema = doc["components"]["schemas"]["io.diskferry.v1alpha1.VirtualDisk"]
    gvk = {"group": "diskferry.io", "version": "v1alpha1", "kind": "VirtualDisk"}
    assert schema["x-kubernetes-group-version-kind"] == [gvk]
    assert "persistentVolumeClaim" in schema["properties"]["spec"]["properties"]
    patch = doc["paths"]["/apis/diskferry.io/v1alpha1/namespaces/{namespace}/virtualdisks/{name}"]
    assert patch["patch"]["x-kubernetes-group-version-kind"] == gvk
    assert "fieldValidation" in {p["name"] for p in patch["patch"]["parameters"]}
    assert client.get("/openapi/v3/apis/nothing/v1").status_code == 404
    v2 = client.get("/openapi/v2", headers={"Accept": "application/json"}).json()
    assert v2["swagger"] == "2.0"
    assert "io.k8s.api.core.v1.Secret" in v2["definitions"]
    proto = client.get(
        "/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    assert proto.status_code == 200
    assert proto.headers["content-type"] == openapiproto.MEDIA_TYPE
    assert proto.content == openapiproto.document(v2)
    assert client.get("/openapi/v2", headers={"Accept": "application/xml"}).status_code == 406


def test_cluster_scoped_kinds(client: TestClient) -> None:
    classes = "/apis/storage.k8s.io/v1/storageclasses"
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local"}}
    created = client.post(classes, json=sc)
    assert created.status_code == 201
    assert "namespace" not in created.json()["metadata"]
    assert client.get(f"{classes}/local").json()["provisioner"] == "diskferry.io/local"
    assert (
        client.get("/apis/storage.k8s.io/v1/namespaces/default/storageclasses").status_code == 404
    )
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}
    assert client.post("/api/v1/namespaces", json=ns).status_code == 201
    status = client.get("/api/v1/namespaces/team/status")
    assert status.json()["status"]["phase"] == "Active"
    assert client.post("/api/v1/namespaces/team/secrets", json=secret("s")).status_code == 201
    everywhere = client.get("/api/v1/secrets").json()["items"]
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in everywhere] == [
        ("team", "s")
    ]
    assert client.post("/api/v1/secrets", json=secret("t")).status_code == 405


def secret(name: str) -> dict:
    """A Secret manifest."""
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}
