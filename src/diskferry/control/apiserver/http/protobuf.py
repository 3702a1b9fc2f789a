"""Request bodies in Kubernetes' protobuf encoding, as kubectl sends them for some core kinds.

Only decoding, and only the messages kubectl writes imperatively (`create namespace`,
`create secret`, deletes, `auth can-i`, `auth whoami`): Namespace, Secret, DeleteOptions and
the reviews. A review's status is the answer's, and is not read. Answers stay JSON.
"""

from __future__ import annotations

import base64
from typing import Any

from diskferry.control.errors import BadRequestError, UnsupportedMediaTypeError

MEDIA_TYPE = "application/vnd.kubernetes.protobuf"
MAGIC = b"k8s\x00"
VARINT, FIXED64, BYTES, FIXED32 = 0, 1, 2, 5

# message -> field number -> (JSON name, type, repeated); a type is a scalar name or a message
Field = tuple[str, str, bool]
MESSAGES: dict[str, dict[int, Field]] = {
    "Unknown": {1: ("typeMeta", "TypeMeta", False), 2: ("raw", "raw", False)},
    "TypeMeta": {1: ("apiVersion", "string", False), 2: ("kind", "string", False)},
    "ObjectMeta": {
        1: ("name", "string", False),
        2: ("generateName", "string", False),
        3: ("namespace", "string", False),
        5: ("uid", "string", False),
        6: ("resourceVersion", "string", False),
        7: ("generation", "int", False),
        11: ("labels", "map_string", True),
        12: ("annotations", "map_string", True),
        13: ("ownerReferences", "OwnerReference", True),
        14: ("finalizers", "string", True),
    },
    "OwnerReference": {
        1: ("kind", "string", False),
        3: ("name", "string", False),
        4: ("uid", "string", False),
        5: ("apiVersion", "string", False),
        6: ("controller", "bool", False),
        7: ("blockOwnerDeletion", "bool", False),
    },
    "MapString": {1: ("key", "string", False), 2: ("value", "string", False)},
    "MapBytes": {1: ("key", "string", False), 2: ("value", "bytes", False)},
    "Namespace": {
        1: ("metadata", "ObjectMeta", False),
        2: ("spec", "NamespaceSpec", False),
    },
    "NamespaceSpec": {1: ("finalizers", "string", True)},
    "Secret": {
        1: ("metadata", "ObjectMeta", False),
        2: ("data", "map_bytes", True),
        3: ("type", "string", False),
        4: ("stringData", "map_string", True),
        5: ("immutable", "bool", False),
    },
    "DeleteOptions": {
        1: ("gracePeriodSeconds", "int", False),
        2: ("preconditions", "Preconditions", False),
        4: ("propagationPolicy", "string", False),
        5: ("dryRun", "string", True),
    },
    "Preconditions": {1: ("uid", "string", False), 2: ("resourceVersion", "string", False)},
    "SelfSubjectAccessReview": {
        1: ("metadata", "ObjectMeta", False),
        2: ("spec", "SelfSubjectAccessReviewSpec", False),
    },
    "SelfSubjectAccessReviewSpec": {
        1: ("resourceAttributes", "ResourceAttributes", False),
        2: ("nonResourceAttributes", "NonResourceAttributes", False),
    },
    "ResourceAttributes": {
        1: ("namespace", "string", False),
        2: ("verb", "string", False),
        3: ("group", "string", False),
        4: ("version", "string", False),
        5: ("resource", "string", False),
        6: ("subresource", "string", False),
        7: ("name", "string", False),
    },
    "NonResourceAttributes": {1: ("path", "string", False), 2: ("verb", "string", False)},
    "SelfSubjectRulesReview": {
        1: ("metadata", "ObjectMeta", False),
        2: ("spec", "SelfSubjectRulesReviewSpec", False),
    },
    "SelfSubjectRulesReviewSpec": {1: ("namespace", "string", False)},
    "SelfSubjectReview": {1: ("metadata", "ObjectMeta", False)},
}
KINDS = (
    "Namespace",
    "Secret",
    "DeleteOptions",
    "SelfSubjectAccessReview",
    "SelfSubjectRulesReview",
    "SelfSubjectReview",
)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise BadRequestError("protobuf body: truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int, Any]]:
    """The (number, wire type, value) of each field of one encoded message."""
    out, pos = [], 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = _varint(data, pos)
        elif wire == BYTES:
            length, pos = _varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
            if pos > len(data):
                raise BadRequestError("protobuf body: truncated field")
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
            continue
        else:
            raise BadRequestError(f"protobuf body: unsupported wire type {wire}")
        out.append((number, wire, value))
    return out


def _scalar(kind: str, value: Any) -> Any:
    if kind == "string":
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            raise BadRequestError("protobuf body: a string is not UTF-8") from None
    if kind == "bytes":
        return base64.b64encode(bytes(value)).decode()
    if kind == "bool":
        return bool(value)
    if kind == "int":
        return value - (1 << 64) if value >= 1 << 63 else value
    return bytes(value)


def _wire(kind: str) -> int:
    """The wire type a field of `kind` is sent in: numbers as varints, the rest as bytes."""
    return VARINT if kind in ("int", "bool") else BYTES


def message(name: str, data: bytes) -> dict[str, Any]:
    """The message `name` encoded in `data`, as its JSON object."""
    schema = MESSAGES[name]
    out: dict[str, Any] = {}
    for number, wire, value in _fields(data):
        if number not in schema:
            continue
        key, kind, repeated = schema[number]
        if wire != _wire(kind):
            raise BadRequestError(f"protobuf body: {name}.{key} is sent in wire type {wire}")
        if kind.startswith("map_"):
            entry = message("MapString" if kind == "map_string" else "MapBytes", value)
            out.setdefault(key, {})[entry.get("key", "")] = entry.get("value", "")
            continue
        decoded = message(kind, value) if kind in MESSAGES else _scalar(kind, value)
        if repeated:
            out.setdefault(key, []).append(decoded)
        elif decoded not in ("", 0, False):  # Go writes unset optional scalars as zero values
            out[key] = decoded
    return out


def decode(data: bytes) -> dict[str, Any]:
    """A body in the protobuf envelope (`k8s\\0` + runtime.Unknown) as its JSON object."""
    if not data.startswith(MAGIC):
        raise BadRequestError("protobuf body: no k8s envelope")
    envelope = message("Unknown", data[len(MAGIC) :])
    type_meta = envelope.get("typeMeta", {})
    kind = type_meta.get("kind", "")
    if kind not in KINDS:
        raise UnsupportedMediaTypeError(
            f"{MEDIA_TYPE} is accepted for {', '.join(KINDS)}, not {kind or 'this body'}: "
            "send application/json"
        )
    body = message(kind, envelope.get("raw", b""))
    if kind != "DeleteOptions":
        body = {"apiVersion": type_meta.get("apiVersion", "v1"), "kind": kind, **body}
    return body
