"""Protobuf request bodies: the k8s envelope decoded for Namespace, Secret, DeleteOptions and
the reviews `kubectl auth` sends."""

from __future__ import annotations

import pytest

from diskferry.control.apiserver.http.protobuf import MAGIC, decode
from diskferry.control.errors import BadRequestError, UnsupportedMediaTypeError


def _varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def _field(number: int, value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(raw)) + raw


def _envelope(kind: str, raw: bytes, api_version: str = "v1") -> bytes:
    type_meta = _field(1, api_version) + _field(2, kind)
    return MAGIC + _field(1, type_meta) + _field(2, raw)


def test_secret() -> None:
    meta = _field(1, "s") + _field(2, "") + _field(11, _field(1, "app") + _field(2, "x"))
    data = _field(2, _field(1, "token") + _field(2, b"\x00\xff"))
    raw = _field(1, meta) + data + _field(3, "Opaque") + _field(5, 0)
    assert decode(_envelope("Secret", raw)) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s", "labels": {"app": "x"}},
        "data": {"token": "AP8="},
        "type": "Opaque",
    }


def test_delete_options() -> None:
    raw = _field(4, "Foreground") + _field(5, "All") + _field(2, _field(1, "uid-1"))
    assert decode(_envelope("DeleteOptions", raw)) == {
        "propagationPolicy": "Foreground",
        "dryRun": ["All"],
        "preconditions": {"uid": "uid-1"},
    }


def test_access_review_as_kubectl_auth_can_i_sends_it() -> None:
    empty_meta = b"".join(_field(n, "") for n in (1, 2, 3, 4, 5, 6)) + _field(7, 0)
    attributes = (
        _field(1, "ns1")
        + _field(2, "create")
        + _field(3, "diskferry.io")
        + _field(4, "")
        + _field(5, "virtualdisks")
        + _field(6, "status")
        + _field(7, "vd1")
    )
    raw = _field(1, empty_meta) + _field(2, _field(1, attributes)) + _field(3, _field(3, 0))
    review = decode(_envelope("SelfSubjectAccessReview", raw, "authorization.k8s.io/v1"))
    assert review == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "metadata": {},
        "spec": {
            "resourceAttributes": {
                "namespace": "ns1",
                "verb": "create",
                "group": "diskferry.io",
                "resource": "virtualdisks",
                "subresource": "status",
                "name": "vd1",
            }
        },
    }
    other_path = _field(2, _field(2, _field(1, "/healthz") + _field(2, "get")))
    on_a_path = decode(_envelope("SelfSubjectAccessReview", other_path, "authorization.k8s.io/v1"))
    assert on_a_path["spec"] == {"nonResourceAttributes": {"path": "/healthz", "verb": "get"}}


def test_rules_and_self_reviews() -> None:
    rules = _field(1, b"") + _field(2, _field(1, "ns2")) + _field(3, _field(3, 0))
    review = decode(_envelope("SelfSubjectRulesReview", rules, "authorization.k8s.io/v1"))
    assert review["spec"] == {"namespace": "ns2"} and "status" not in review
    me = decode(_envelope("SelfSubjectReview", _field(1, b""), "authentication.k8s.io/v1"))
    assert me == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "SelfSubjectReview",
        "metadata": {},
    }


def test_other_kinds_and_broken_bodies_are_refused() -> None:
    with pytest.raises(UnsupportedMediaTypeError):
        decode(_envelope("Pod", b""))
    with pytest.raises(BadRequestError):
        decode(b"not protobuf")
    with pytest.raises(BadRequestError):
        decode(MAGIC + b"\x0a\xff")
