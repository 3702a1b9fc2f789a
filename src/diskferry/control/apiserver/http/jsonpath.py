"""The JSONPath subset of print columns: `.a.b` (a `.` or `/` in a name escaped with `\\`, as
`.metadata.annotations.a\\.b\\/c`), `[N]`, `[*]`, and filters on a string (`[?(@.k=='v')]`) or
on a boolean, null or number (`[?(@.mounted==true)]`)."""

from __future__ import annotations

import json
import re
from typing import Any

_STEP = re.compile(
    r"""\.(?P<field>(?:[A-Za-z0-9_\-]|\\[./])+)
    |\[(?P<index>-?\d+|\*)\]
    |\[\?\(@\.(?P<key>[A-Za-z0-9_.\-]+)\s*==\s*
        (?:(?P<quote>['"])(?P<value>.*?)(?P=quote)|(?P<literal>true|false|null|-?\d+(?:\.\d+)?))
    \)\]""",
    re.VERBOSE,
)

_ESCAPED = re.compile(r"\\(.)")


class JsonPathError(ValueError):
    """A print column's path this evaluator does not read."""


def _steps(path: str) -> list[re.Match[str]]:
    text = path.strip().removeprefix("{").removesuffix("}").removeprefix("$")
    steps, pos = [], 0
    while pos < len(text):
        match = _STEP.match(text, pos)
        if match is None:
            raise JsonPathError(f"cannot read the JSONPath {path!r} at {text[pos:]!r}")
        steps.append(match)
        pos = match.end()
    return steps


def _dig(value: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _matches(value: Any, step: re.Match[str]) -> bool:
    """Whether `value` has at the filter's key what the filter wants: the string given, or the
    literal given, of the same JSON type."""
    found = _dig(value, step["key"])
    if step["literal"] is None:
        return str(found) == step["value"]
    wanted = json.loads(step["literal"])
    return type(found) is type(wanted) and found == wanted


def evaluate(path: str, obj: Any) -> list[Any]:
    """Every value `path` selects in `obj`, in order; empty when it selects nothing."""
    values = [obj]
    for step in _steps(path):
        found: list[Any] = []
        for value in values:
            if step["field"] is not None:
                name = _ESCAPED.sub(r"\1", step["field"])
                if isinstance(value, dict) and name in value:
                    found.append(value[name])
            elif not isinstance(value, list):
                continue
            elif step["index"] == "*":
                found.extend(value)
            elif step["index"] is not None:
                index = int(step["index"])
                if -len(value) <= index < len(value):
                    found.append(value[index])
            else:
                found.extend(v for v in value if _matches(v, step))
        values = found
    return values
