"""`kubectl auth can-i` and `kubectl auth whoami` against a real `diskferry serve`: the daemon's
token may do everything, and says who it is."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from daemon_support import Served, kubectl, start_daemon


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One daemon for the module's tests."""
    base = tmp_path_factory.mktemp("kubectl-auth")
    served = start_daemon(base / "data", base / "daemon.log")
    yield served
    assert served.stop() == 0


@pytest.mark.parametrize(
    "question",
    [
        ("create", "virtualdisks"),
        ("delete", "secrets", "-n", "default"),
        ("patch", "virtualdisks/status"),
        ("list", "storageclasses"),
        ("get", "/healthz"),
        ("*", "*", "--all-namespaces"),
    ],
)
def test_can_i_answers_yes(daemon: Served, question: tuple[str, ...]) -> None:
    assert kubectl(daemon, "auth", "can-i", *question).strip() == "yes"


def test_can_i_list_shows_every_verb_on_everything(daemon: Served) -> None:
    lines = kubectl(daemon, "auth", "can-i", "--list").splitlines()
    assert lines[0].split() == ["Resources", "Non-Resource", "URLs", "Resource", "Names", "Verbs"]
    rows = [line.split() for line in lines[1:]]
    assert ["*.*", "[]", "[]", "[*]"] in rows
    assert ["[*]", "[]", "[*]"] in rows


def test_whoami_names_the_admin(daemon: Served) -> None:
    table = kubectl(daemon, "auth", "whoami").splitlines()
    assert table[0].split() == ["ATTRIBUTE", "VALUE"]
    assert table[1].split() == ["Username", "diskferry-admin"]
    assert table[2].split() == ["Groups", "[system:masters", "system:authenticated]"]
    review = json.loads(kubectl(daemon, "auth", "whoami", "-o", "json"))
    assert review["kind"] == "SelfSubjectReview"
    assert review["apiVersion"] == "authentication.k8s.io/v1"
    assert review["status"]["userInfo"]["username"] == "diskferry-admin"


def test_the_reviews_are_listed_as_create_only(daemon: Served) -> None:
    listed = kubectl(daemon, "api-resources", "--verbs=create", "-o", "name").split()
    assert {
        "selfsubjectaccessreviews.authorization.k8s.io",
        "selfsubjectrulesreviews.authorization.k8s.io",
        "selfsubjectreviews.authentication.k8s.io",
        "tokenreviews.authentication.k8s.io",
    } <= set(listed)
    refused = kubectl(daemon, "get", "selfsubjectaccessreviews", ok=False)
    assert "MethodNotAllowed" in refused or "does not allow" in refused
