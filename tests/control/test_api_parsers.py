"""The API's body parsers on their own: JSON, YAML, protobuf and patches give a JSON value the
store takes, or a 4xx ApiError saying why."""

from __future__ import annotations

import json

import pytest

from diskferry.control.apiserver.http import bodies
from diskferry.control.apiserver.http.protobuf import MAGIC
from diskferry.control.apiserver.store import patch as patches
from diskferry.control.apiserver.store.values import MAX_DEPTH, check, depth
from diskferry.control.errors import ApiError, BadRequestError, RequestEntityTooLargeError

PROTOBUF = "application/vnd.kubernetes.protobuf"


def nested(levels: int) -> list:
    """An array `levels` arrays deep."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _refused(call, *args, match: str | None = None) -> ApiError:
    with pytest.raises(ApiError, match=match) as raised:
        call(*args)
    assert 400 <= raised.value.code < 500
    return raised.value


@pytest.mark.parametrize(
    ("value", "levels"),
    [(0, 0), ("[{", 0), ({}, 1), ([], 1), (nested(7), 7), ({"a": [1, {}], "b": [[[]]]}, 4)],
)
def test_depth_counts_the_deepest_objects_and_arrays(value, levels: int) -> None:
    assert depth(value) == levels


def test_json_as_deep_as_allowed_and_one_deeper() -> None:
    text = json.dumps(nested(MAX_DEPTH)).encode()
    assert bodies.decode(text, "application/json") == nested(MAX_DEPTH)
    _refused(bodies.decode, json.dumps(nested(MAX_DEPTH + 1)).encode(), None, match="nested")
    _refused(bodies.decode, b"[" * 100_000, None, match="nested")


@pytest.mark.parametrize(
    "text",
    [b"NaN", b"[Infinity]", b"1e400", b'"\\ud800"', b'{"\\udc00": 1}', b"1" * 5000, b"{", b"\xff"],
    ids=["nan", "infinity", "overflow", "surrogate", "surrogate-key", "huge-int", "cut", "bytes"],
)
def test_json_that_the_store_cannot_keep_is_400(text: bytes) -> None:
    assert isinstance(_refused(bodies.decode, text, "application/json"), BadRequestError)


def test_yaml_reads_as_json() -> None:
    text = b"a: 2026-01-02\nb: [1, 2.5, true, null, '3']\nc: {<<: {d: 1}, e: 2}\n"
    assert bodies.decode(text, "application/yaml") == {
        "a": "2026-01-02",
        "b": [1, 2.5, True, None, "3"],
        "c": {"d": 1, "e": 2},
    }


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"a: &x 1\nb: *x\n", "anchors and aliases"),
        (b"a: &x 1\n", "anchors and aliases"),
        (b"a: !!binary aGk=\n", "bytes"),
        (b"a: !!timestamp 2026-01-02\n", "date"),
        (b"a: !!set {b, c}\n", "set"),
        (b"a: .nan\n", "JSON number"),
        (b"1: a\n", "not a string"),
        (b"a: !!python/name:os.system\n", "decoded"),
        (b"[" * 200 + b"]" * 200, "nested"),
        (b"a: [\n", "decoded"),
        (b"a: 1\n---\nb: 2\n", "decoded"),
    ],
)
def test_yaml_that_is_no_json_value_is_400(text: bytes, match: str) -> None:
    _refused(bodies.decode, text, "application/yaml", match=match)


def test_an_apply_configuration_is_an_object_with_metadata() -> None:
    assert bodies.apply_configuration(b"kind: X\n") == {"kind": "X", "metadata": {}}
    _refused(bodies.apply_configuration, b"- a\n", match="must be an object")
    _refused(bodies.apply_configuration, b"metadata: [a]\n", match="must be an object")


def test_an_empty_body_is_none_and_another_type_is_415() -> None:
    assert bodies.decode(b" \n", "text/plain") is None
    assert _refused(bodies.decode, b"{}", "text/plain").code == 415


@pytest.mark.parametrize(
    "secret",
    [
        b"\x08\x80\x80\x80\x80\x80\x80\x01",  # the name as a varint of 2**42
        b"\x0a\x02\xff\xfe",  # the name not UTF-8
        b"\x10\x05",  # data, a map, as a varint
    ],
    ids=["varint-for-string", "not-utf8", "varint-for-map"],
)
def test_protobuf_fields_not_as_their_type_are_400(secret: bytes) -> None:
    type_meta = b"\x0a\x02v1\x12\x06Secret"
    meta = b"\x0a" + bytes([len(secret)]) + secret
    body = MAGIC + b"\x0a" + bytes([len(type_meta)]) + type_meta + b"\x12" + bytes([len(meta)])
    _refused(bodies.decode, body + meta, PROTOBUF, match="protobuf body")


@pytest.mark.parametrize(
    "patch",
    [{"a": nested(MAX_DEPTH)}, [{"op": "add", "path": "/a", "value": nested(MAX_DEPTH - 1)}]],
    ids=["merge", "json"],
)
def test_patches_nested_too_deep_are_400(patch) -> None:
    _refused(patches.decode, json.dumps(patch), match="nested")
    _refused(patches.decode, "[" * 100_000, match="nested")


def test_a_json_patch_keeps_nesting_and_copies_bounded() -> None:
    half = nested(MAX_DEPTH // 2)
    innermost = "/a" + "/0" * (MAX_DEPTH // 2)  # into the innermost array of the first
    grow = [{"op": "add", "path": "/a", "value": half}, {"op": "add", "path": innermost}]
    grow[1]["value"] = nested(MAX_DEPTH // 2 - 1)
    assert depth(patches.json_patch({}, grow)) == MAX_DEPTH
    grow[1]["value"] = half
    _refused(patches.json_patch, {}, grow, match="nested")
    doubling = [{"op": "copy", "from": "/a", "path": f"/a/{n}"} for n in range(30)]
    error = _refused(patches.json_patch, {"a": {"b": "c" * 64}}, doubling, match="copies")
    assert isinstance(error, RequestEntityTooLargeError)
    moved = [{"op": "move", "from": "/a", "path": "/b"}]
    assert patches.json_patch({"a": half}, moved) == {"b": half}


def test_a_json_patch_of_too_many_operations_is_413() -> None:
    operations = [{"op": "test", "path": "", "value": {}}] * (patches.MAX_JSON_PATCH_OPERATIONS)
    assert patches.json_patch({}, operations) == {}
    error = _refused(patches.json_patch, {}, [*operations, operations[0]], match="10000")
    assert isinstance(error, RequestEntityTooLargeError)


@pytest.mark.parametrize(
    "patch",
    [
        {"metadata": {"$retainKeys": 5}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": 5}},
    ],
    ids=["retainKeys", "deleteFromPrimitiveList"],
)
def test_strategic_directives_of_the_wrong_shape_are_400(patch: dict) -> None:
    _refused(patches.apply, {"metadata": {"finalizers": ["a"]}}, patch, "strategic")


def test_a_strategic_merge_over_fields_of_another_shape_replaces_them() -> None:
    target = {"metadata": {"finalizers": 5}, "status": {"conditions": ["odd"]}}
    patch = {
        "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
        "status": {"conditions": [{"type": "Ready"}]},
    }
    assert patches.apply(target, patch, "strategic") == {
        "metadata": {"finalizers": []},
        "status": {"conditions": ["odd", {"type": "Ready"}]},
    }


def test_check_names_what_it_checks() -> None:
    assert check({"a": [1, 2.5, None, True, "x"]}, "it") == {"a": [1, 2.5, None, True, "x"]}
    with pytest.raises(BadRequestError, match=r"^the thing: a tuple"):
        check({"a": (1,)}, "the thing")
