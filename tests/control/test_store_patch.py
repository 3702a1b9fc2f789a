"""Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch."""

from __future__ import annotations

import pytest

from diskferry.control.apiserver.store.patch import (
    decode,
    json_patch,
    merge_patch,
    patch_kind,
    strategic_merge_patch,
)
from diskferry.control.errors import (
    BadRequestError,
    InvalidError,
    UnsupportedMediaTypeError,
)


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_merge_patch_rfc7386_examples(target: dict, patch: dict, result: dict) -> None:
    assert merge_patch(target, patch) == result


def test_merge_patch_leaves_the_target_alone() -> None:
    target = {"a": {"b": 1}}
    merge_patch(target, {"a": {"b": 2}})
    assert target == {"a": {"b": 1}}


def test_json_patch_operations() -> None:
    doc = {"foo": ["bar", "baz"], "a/b": 1, "m~n": 2, "obj": {"x": 1}}
    ops = [
        {"op": "add", "path": "/foo/1", "value": "qux"},
        {"op": "add", "path": "/foo/-", "value": "end"},
        {"op": "remove", "path": "/a~1b"},
        {"op": "replace", "path": "/m~0n", "value": 3},
        {"op": "copy", "from": "/obj", "path": "/copy"},
        {"op": "move", "from": "/obj/x", "path": "/moved"},
        {"op": "test", "path": "/foo/0", "value": "bar"},
    ]
    assert json_patch(doc, ops) == {
        "foo": ["bar", "qux", "baz", "end"],
        "m~n": 3,
        "obj": {},
        "copy": {"x": 1},
        "moved": 1,
    }
    assert doc["foo"] == ["bar", "baz"]


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "test", "path": "/a", "value": 2}],
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/list/5", "value": 1}],
        [{"op": "add", "path": "/no/such/parent", "value": 1}],
        [{"op": "move", "from": "/o", "path": "/o/inner"}],
    ],
)
def test_json_patch_that_does_not_apply(ops: list) -> None:
    with pytest.raises(InvalidError):
        json_patch({"a": 1, "list": [], "o": {}}, ops)


@pytest.mark.parametrize(
    "ops",
    [{"op": "add"}, [{"op": "add", "path": "a", "value": 1}], [{"op": "jump", "path": "/a"}]],
)
def test_malformed_json_patch(ops: object) -> None:
    with pytest.raises(BadRequestError):
        json_patch({"a": 1}, ops)


def test_strategic_merge_patch_merges_by_key_where_kubernetes_does() -> None:
    target = {
        "metadata": {
            "finalizers": ["a"],
            "ownerReferences": [{"uid": "1", "name": "x"}, {"uid": "2", "name": "y"}],
            "labels": {"k": "v"},
        },
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        "spec": {"finalizers": ["kubernetes"]},
    }
    patch = {
        "metadata": {
            "finalizers": ["b", "a"],
            "ownerReferences": [{"uid": "2", "name": "z"}, {"uid": "1", "$patch": "delete"}],
            "labels": {"k": None, "n": "m"},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Done", "status": "True"}]
        },
        "spec": {"finalizers": []},
    }
    assert strategic_merge_patch(target, patch) == {
        "metadata": {
            "finalizers": ["a", "b"],
            "ownerReferences": [{"uid": "2", "name": "z"}],
            "labels": {"n": "m"},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "Done", "status": "True"}]
        },
        "spec": {"finalizers": []},
    }


def test_strategic_directives() -> None:
    target = {"data": {"a": "1", "b": "2"}, "metadata": {"finalizers": ["x", "y"]}}
    assert strategic_merge_patch(target, {"data": {"$patch": "replace", "c": "3"}})["data"] == {
        "c": "3"
    }
    assert "data" not in strategic_merge_patch(target, {"data": {"$patch": "delete"}})
    removed = strategic_merge_patch(
        target, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}
    )
    assert removed["metadata"]["finalizers"] == ["y"]
    kept = strategic_merge_patch(target, {"data": {"$retainKeys": ["a"], "c": "3"}})
    assert kept["data"] == {"a": "1", "c": "3"}


def test_patch_kinds() -> None:
    assert patch_kind("application/merge-patch+json", strategic=False) == "merge"
    assert patch_kind("json", strategic=False) == "json"
    assert patch_kind("application/strategic-merge-patch+json", strategic=True) == "strategic"
    with pytest.raises(UnsupportedMediaTypeError, match="unknown format"):
        patch_kind("strategic", strategic=False)
    with pytest.raises(UnsupportedMediaTypeError):
        patch_kind("application/yaml", strategic=True)


def test_decode() -> None:
    assert decode(b'{"a": 1}') == {"a": 1}
    assert decode([1]) == [1]
    with pytest.raises(BadRequestError):
        decode("{not json")
