"""Request bodies as JSON values: JSON, YAML and protobuf, each refused with a 400 when it is
not a JSON value the store takes (see store/values.py).

YAML is read as kube-apiserver reads it (sigs.k8s.io/yaml): into JSON, with dates left as the
strings they are. Anchors and aliases are refused: an alias names a node again, and a few
hundred bytes of them describe an object of gigabytes once expanded ("billion laughs").
"""

from __future__ import annotations

from typing import Any

import yaml

from diskferry.control.apiserver.http import media, protobuf
from diskferry.control.apiserver.store.values import MAX_DEPTH, check, loads, too_deep
from diskferry.control.errors import BadRequestError

BODY = "the body of the request"
APPLY = "the apply configuration"
TIMESTAMP = "tag:yaml.org,2002:timestamp"
OPENING = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
CLOSING = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


class _JsonLoader(yaml.CSafeLoader):
    """libyaml's safe loader, without the implicit timestamp: `2026-01-02` stays a string."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != TIMESTAMP]
        for first, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
    }


def _scan(raw: bytes, what: str) -> None:
    """Refuse anchors, aliases and nesting deeper than MAX_DEPTH, from libyaml's events: no
    node is made before the whole text passed."""
    loader = yaml.CSafeLoader(raw)
    level = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise BadRequestError(f"{what}: YAML anchors and aliases are not accepted")
            if isinstance(event, OPENING):
                level += 1
                if level > MAX_DEPTH:
                    raise too_deep(what)
            elif isinstance(event, CLOSING):
                level -= 1
    except yaml.YAMLError as error:
        raise BadRequestError(f"{what} cannot be decoded: {error}") from None
    finally:
        loader.dispose()


def load_yaml(raw: bytes, what: str = BODY) -> Any:
    """The JSON value the YAML document `raw` holds; BadRequestError naming `what` when it is
    not one, or uses anchors or aliases, or is nested too deep."""
    _scan(raw, what)
    try:
        value = yaml.load(raw, Loader=_JsonLoader)
    except (yaml.YAMLError, ValueError) as error:
        raise BadRequestError(f"{what} cannot be decoded: {error}") from None
    return check(value, what)


def decode(raw: bytes, content_type: str | None) -> Any:
    """The JSON value of a POST, PUT or DELETE body in its content type (JSON, YAML or
    protobuf); None for an empty body. 415 for another type, 400 for a bad body."""
    if not raw.strip():
        return None
    kind = media.body_type(content_type)
    if kind == protobuf.MEDIA_TYPE:
        return check(protobuf.decode(raw), BODY)
    if kind == "application/yaml":
        return load_yaml(raw)
    return loads(raw, BODY)


def apply_configuration(raw: bytes) -> dict[str, Any]:
    """A server-side apply configuration (YAML, or JSON which is YAML too) as its object,
    its metadata an object too."""
    body = load_yaml(raw, APPLY)
    if not isinstance(body, dict) or not isinstance(body.setdefault("metadata", {}), dict):
        raise BadRequestError(f"{APPLY} must be an object, and its metadata too")
    return body
