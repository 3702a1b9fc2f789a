"""`/openapi/v2` in protobuf, as kube-apiserver serves it: gnostic's `openapi.v2.Document`.

kubectl asks for this encoding only (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`)
when it validates on the client, as it does for a `kind: List`. It reads the definitions (each
schema with its `x-kubernetes-group-version-kind`); the document carries the swagger version, the
info and the definitions. Field numbers are those of gnostic's `openapiv2/OpenAPIv2.proto`.
"""

from __future__ import annotations

import struct
from typing import Any

import yaml

MEDIA_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
ACCEPTED = (MEDIA_TYPE, "application/com.github.proto-openapi.spec.v2@v1.0+protobuf")
"""What the answer is labelled, and what an Accept header may name it (kubectl sends the older
`@v1.0` form; a media type with `@` is not one Go's mime parser reads back)."""
VARINT, FIXED64, BYTES = 0, 1, 2
_DOUBLE = struct.Struct("<d")

# JSON schema keyword -> (Schema field number, how it is written)
SCHEMA_FIELDS: dict[str, tuple[int, str]] = {
    "$ref": (1, "string"),
    "format": (2, "string"),
    "title": (3, "string"),
    "description": (4, "string"),
    "default": (5, "any"),
    "multipleOf": (6, "double"),
    "maximum": (7, "double"),
    "exclusiveMaximum": (8, "bool"),
    "minimum": (9, "double"),
    "exclusiveMinimum": (10, "bool"),
    "maxLength": (11, "int"),
    "minLength": (12, "int"),
    "pattern": (13, "string"),
    "maxItems": (14, "int"),
    "minItems": (15, "int"),
    "uniqueItems": (16, "bool"),
    "maxProperties": (17, "int"),
    "minProperties": (18, "int"),
    "required": (19, "strings"),
    "enum": (20, "anys"),
    "additionalProperties": (21, "additional"),
    "type": (22, "type"),
    "items": (23, "items"),
    "allOf": (24, "schemas"),
    "properties": (25, "properties"),
    "discriminator": (26, "string"),
    "readOnly": (27, "bool"),
    "example": (30, "any"),
}
VENDOR_EXTENSION = 31


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s as ten bytes, as protobuf writes them
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes(number: int, data: bytes) -> bytes:
    return _key(number, BYTES) + _varint(len(data)) + data


def _string(number: int, text: str) -> bytes:
    return _bytes(number, text.encode())


def _any(number: int, value: Any) -> bytes:
    """An `Any` holding `value` as YAML, as gnostic keeps values it has no type for."""
    return _bytes(number, _string(2, yaml.safe_dump(value, default_flow_style=False)))


def _named(number: int, name: str, value: bytes) -> bytes:
    """One (name, value) pair of gnostic's ordered maps (NamedSchema, NamedAny)."""
    return _bytes(number, _string(1, name) + _bytes(2, value))


def _field(number: int, how: str, value: Any) -> bytes:
    if how == "string":
        return _string(number, str(value))
    if how == "bool":
        return _key(number, VARINT) + _varint(int(bool(value)))
    if how == "int":
        return _key(number, VARINT) + _varint(int(value))
    if how == "double":
        return _key(number, FIXED64) + _DOUBLE.pack(float(value))
    if how == "any":
        return _any(number, value)
    if how == "strings":
        return b"".join(_string(number, str(v)) for v in value)
    if how == "anys":
        return b"".join(_any(number, v) for v in value)
    if how == "type":
        kinds = value if isinstance(value, list) else [value]
        return _bytes(number, b"".join(_string(1, k) for k in kinds))
    if how == "additional":
        inner = _bytes(1, schema(value)) if isinstance(value, dict) else _field(2, "bool", value)
        return _bytes(number, inner)
    if how == "items":
        branches = value if isinstance(value, list) else [value]
        return _bytes(number, b"".join(_bytes(1, schema(b)) for b in branches))
    if how == "schemas":
        return b"".join(_bytes(number, schema(v)) for v in value)
    if how == "properties":
        return _bytes(number, b"".join(_named(1, k, schema(v)) for k, v in value.items()))
    raise ValueError(f"no way to write {how}")


def schema(node: dict[str, Any]) -> bytes:
    """One JSON schema as an `openapi.v2.Schema`; `x-` keys as vendor extensions, keywords
    Swagger 2.0 lacks left out."""
    out = bytearray()
    for key, value in node.items():
        if key in SCHEMA_FIELDS:
            number, how = SCHEMA_FIELDS[key]
            out += _field(number, how, value)
        elif key.startswith("x-"):
            out += _bytes(VENDOR_EXTENSION, _string(1, key) + _any(2, value))
    return bytes(out)


def document(doc: dict[str, Any]) -> bytes:
    """The Swagger 2.0 document `doc` as an `openapi.v2.Document`: its version, info and
    definitions."""
    info = doc.get("info", {})
    definitions = b"".join(
        _named(1, name, schema(value)) for name, value in doc.get("definitions", {}).items()
    )
    return (
        _string(1, doc["swagger"])
        + _bytes(2, _string(1, info.get("title", "")) + _string(2, info.get("version", "")))
        + _bytes(9, definitions)
    )
