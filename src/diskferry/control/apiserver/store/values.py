"""JSON values as the API takes them from clients: JSON's types only, nested MAX_DEPTH deep at most.

Python's parsers, and the code that copies, validates and compares objects, recurse: a value
nested deeper than any object needs is refused before anything walks it. kube-apiserver
allows 10000 levels to Go's growable stacks; no object of ours comes near 100.
"""

from __future__ import annotations

import json
import math
from typing import Any

from diskferry.control.errors import BadRequestError

MAX_DEPTH = 100


def too_deep(what: str) -> BadRequestError:
    """The 400 for a value nested deeper than MAX_DEPTH."""
    return BadRequestError(f"{what} is nested too deep: more than {MAX_DEPTH} levels")


def depth(value: Any) -> int:
    """How many objects and arrays deep `value` is nested (0 for a scalar), counted without
    recursion, so that any value can be measured."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in item)
    return deepest


def _text(item: str, what: str) -> None:
    """BadRequestError for a string UTF-8 cannot hold (a lone surrogate from a `\\ud800`)."""
    if not item.isascii():
        try:
            item.encode()
        except UnicodeEncodeError:
            raise BadRequestError(f"{what}: a string is not valid Unicode") from None


def check(value: Any, what: str) -> Any:
    """`value` itself when it is a JSON value nested MAX_DEPTH deep at most: objects with
    string keys, arrays, strings, integers, finite numbers, booleans and null.

    BadRequestError naming `what` (such as "the body of the request") otherwise.
    """
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > MAX_DEPTH:
                raise too_deep(what)
            if isinstance(item, dict):
                for key in item:
                    if not isinstance(key, str):
                        raise BadRequestError(f"{what}: an object has a key that is not a string")
                    _text(key, what)
                item = item.values()
            stack.extend((child, level + 1) for child in item)
        elif isinstance(item, str):
            _text(item, what)
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise BadRequestError(f"{what}: {item} is not a JSON number")
        elif not isinstance(item, int | None):  # bool is an int
            raise BadRequestError(f"{what}: a {type(item).__name__} is not a JSON value")
    return value


def loads(raw: bytes | str, what: str) -> Any:
    """The JSON value `raw` holds; BadRequestError naming `what` when it is not JSON or is
    nested too deep."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise too_deep(what) from None
    except ValueError as error:
        raise BadRequestError(f"{what} cannot be decoded: {error}") from None
    return check(value, what)
