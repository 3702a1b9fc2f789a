"""The reviews kubectl asks who it is and what it may do: SelfSubjectAccessReview,
SelfSubjectRulesReview, SelfSubjectReview and TokenReview, answered and never stored."""

from __future__ import annotations

from typing import Any

import pytest
from api_support import TOKEN, client, server
from fastapi.testclient import TestClient

from diskferry.control.apiserver.http.app import ApiServer

__all__ = ["client", "server"]

AUTHZ = "/apis/authorization.k8s.io/v1"
AUTHN = "/apis/authentication.k8s.io/v1"
ADMIN = {"username": "diskferry-admin", "groups": ["system:masters", "system:authenticated"]}


def _review(kind: str, api_version: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": {}}
    if spec is not None:
        body["spec"] = spec
    return body


def _access(spec: dict[str, Any]) -> dict[str, Any]:
    return _review("SelfSubjectAccessReview", "authorization.k8s.io/v1", spec)


@pytest.mark.parametrize(
    "spec",
    [
        {
            "resourceAttributes": {
                "verb": "create",
                "group": "diskferry.io",
                "resource": "virtualdisks",
            }
        },
        {"resourceAttributes": {"namespace": "x", "verb": "delete", "resource": "secrets"}},
        {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}},
    ],
)
def test_access_review_allows_everything(client: TestClient, spec: dict[str, Any]) -> None:
    answer = client.post(f"{AUTHZ}/selfsubjectaccessreviews", json=_access(spec))
    assert answer.status_code == 201
    body = answer.json()
    assert body["kind"] == "SelfSubjectAccessReview"
    assert body["apiVersion"] == "authorization.k8s.io/v1"
    assert body["spec"] == spec
    assert body["status"]["allowed"] is True


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {
            "resourceAttributes": {"verb": "get", "resource": "secrets"},
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    ],
)
def test_access_review_needs_exactly_one_kind_of_attributes(
    client: TestClient, spec: dict[str, Any]
) -> None:
    answer = client.post(f"{AUTHZ}/selfsubjectaccessreviews", json=_access(spec))
    assert answer.status_code == 422
    assert answer.json()["reason"] == "Invalid"
    assert "exactly one of nonResourceAttributes or resourceAttributes" in answer.json()["message"]


def test_a_review_of_another_kind_or_with_unknown_fields_is_refused(client: TestClient) -> None:
    other = _review("SelfSubjectRulesReview", "authorization.k8s.io/v1", {})
    assert client.post(f"{AUTHZ}/selfsubjectaccessreviews", json=other).status_code == 400
    unknown = _access({"resourceAttributes": {"verb": "get", "bogus": 1}})
    answer = client.post(f"{AUTHZ}/selfsubjectaccessreviews", json=unknown)
    assert answer.status_code == 422
    assert "spec.resourceAttributes.bogus" in answer.json()["message"]


def test_rules_review_lists_every_verb_on_everything(client: TestClient) -> None:
    body = _review("SelfSubjectRulesReview", "authorization.k8s.io/v1", {"namespace": "default"})
    answer = client.post(f"{AUTHZ}/selfsubjectrulesreviews", json=body)
    assert answer.status_code == 201
    status = answer.json()["status"]
    assert status["resourceRules"] == [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
    assert status["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
    assert status["incomplete"] is False


def test_self_review_names_the_admin(client: TestClient) -> None:
    answer = client.post(
        f"{AUTHN}/selfsubjectreviews", json=_review("SelfSubjectReview", "authentication.k8s.io/v1")
    )
    assert answer.status_code == 201
    assert answer.json()["status"]["userInfo"] == ADMIN


@pytest.mark.parametrize(("token", "authenticated"), [(TOKEN, True), ("not-it", False)])
def test_token_review_tells_the_daemon_token(
    client: TestClient, token: str, authenticated: bool
) -> None:
    body = _review("TokenReview", "authentication.k8s.io/v1", {"token": token})
    answer = client.post(f"{AUTHN}/tokenreviews", json=body)
    assert answer.status_code == 201
    status = answer.json()["status"]
    assert status["authenticated"] is authenticated
    assert status.get("user") == (ADMIN if authenticated else None)


def test_reviews_need_the_token(server: ApiServer) -> None:
    with TestClient(server.app) as anonymous:
        answer = anonymous.post(
            f"{AUTHN}/selfsubjectreviews",
            json=_review("SelfSubjectReview", "authentication.k8s.io/v1"),
        )
    assert answer.status_code == 401


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_reviews_are_create_only_and_not_stored(client: TestClient, method: str) -> None:
    answer = client.request(method, f"{AUTHZ}/selfsubjectaccessreviews")
    assert answer.status_code == 405
    assert answer.json()["reason"] == "MethodNotAllowed"


def test_discovery_lists_the_reviews(client: TestClient) -> None:
    groups = {g["name"] for g in client.get("/apis").json()["groups"]}
    assert {"authorization.k8s.io", "authentication.k8s.io"} <= groups
    authz = {r["name"]: r for r in client.get(AUTHZ).json()["resources"]}
    assert authz.keys() == {"selfsubjectaccessreviews", "selfsubjectrulesreviews"}
    assert authz["selfsubjectaccessreviews"]["verbs"] == ["create"]
    assert authz["selfsubjectaccessreviews"]["namespaced"] is False
    authn = {r["name"] for r in client.get(AUTHN).json()["resources"]}
    assert authn == {"selfsubjectreviews", "tokenreviews"}
    aggregated = client.get(
        "/apis",
        headers={"Accept": "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"},
    ).json()
    names = {item["metadata"]["name"] for item in aggregated["items"]}
    assert {"authorization.k8s.io", "authentication.k8s.io"} <= names
