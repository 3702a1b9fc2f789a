"""Label and field selectors as Kubernetes parses them, matched against objects' JSON."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from diskferry.control.errors import BadRequestError
from diskferry.control.resources.kinds import KindInfo

TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|<|>|[^\s=!(),<>]+)")
NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{NAME}$")
VALUE = re.compile(rf"^{NAME}?$")
SET_OPERATORS = ("in", "notin")
COMMON_FIELDS = ("metadata.name", "metadata.namespace")
FIELD_ALIASES = {"source": "source.component"}

Labels = dict[str, str]


@dataclass(frozen=True)
class Requirement:
    """One term of a label selector: a key, an operator and its values."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Labels) -> bool:
        """Whether `labels` satisfy the term."""
        present = self.key in labels
        value = labels.get(self.key)
        match self.operator:
            case "exists":
                return present
            case "!":
                return not present
            case "=" | "==" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return value not in self.values
            case ">":
                return present and _int(value) is not None and _int(value) > int(self.values[0])
            case _:
                return present and _int(value) is not None and _int(value) < int(self.values[0])


def _int(text: str | None) -> int | None:
    try:
        return int(text or "")
    except ValueError:
        return None


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector: every requirement must hold."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Labels) -> bool:
        """Whether `labels` satisfy every requirement."""
        return all(req.matches(labels) for req in self.requirements)


def label_selector(labels: Labels) -> str:
    """The selector requiring every label of `labels`: `a=1,b=2`."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _bad(text: str, why: str) -> BadRequestError:
    return BadRequestError(f"unable to parse requirement: {why} in selector {text!r}")


def _tokens(text: str) -> list[str]:
    tokens, pos = [], 0
    for found in TOKEN.finditer(text):
        if found.start() != pos:
            break
        tokens.append(found.group(1))
        pos = found.end()
    if text[pos:].strip():
        raise _bad(text, f"unexpected {text[pos:].strip()[:20]!r}")
    return tokens


def _check(text: str, key: str, values: tuple[str, ...]) -> None:
    if not KEY.match(key):
        raise _bad(text, f"invalid label key {key!r}")
    for value in values:
        if not VALUE.match(value):
            raise _bad(text, f"invalid label value {value!r}")


def parse_labels(text: str | None) -> LabelSelector:
    """`app=web,tier in (a,b),!legacy` as a LabelSelector; BadRequestError when malformed."""
    tokens = _tokens(text or "")
    reqs: list[Requirement] = []
    pos = 0

    def take() -> str:
        nonlocal pos
        if pos >= len(tokens):
            raise _bad(text or "", "unexpected end")
        pos += 1
        return tokens[pos - 1]

    def ahead() -> str | None:
        return tokens[pos] if pos < len(tokens) else None

    while pos < len(tokens):
        first = take()
        if first == "!":
            key = take()
            reqs.append(Requirement(key, "!"))
        else:
            key = first
            op = ahead()
            if op in (None, ","):
                reqs.append(Requirement(key, "exists"))
            elif op in ("=", "==", "!="):
                take()
                value = "" if ahead() in (None, ",") else take()
                reqs.append(Requirement(key, op, (value,)))
            elif op in SET_OPERATORS:
                take()
                reqs.append(Requirement(key, op, _set_values(text or "", take)))
            elif op in ("<", ">"):
                take()
                bound = take()
                if _int(bound) is None:
                    raise _bad(text or "", f"{bound!r} is not an integer")
                reqs.append(Requirement(key, op, (bound,)))
            else:
                raise _bad(text or "", f"unexpected {op!r} after {key!r}")
        _check(
            text or "", reqs[-1].key, reqs[-1].values if reqs[-1].operator not in ("<", ">") else ()
        )
        if pos < len(tokens) and take() != ",":
            raise _bad(text or "", "expected ','")
    return LabelSelector(tuple(reqs))


def _set_values(text: str, take: Callable[[], str]) -> tuple[str, ...]:
    if take() != "(":
        raise _bad(text, "expected '('")
    values: list[str] = []
    while True:
        token = take()
        if token == ")":
            return tuple(values)
        if token == ",":
            continue
        values.append(token)


@dataclass(frozen=True)
class FieldTerm:
    """One term of a field selector: a field path, = or !=, and a value."""

    path: str
    equal: bool
    value: str

    def matches(self, obj: dict[str, Any]) -> bool:
        """Whether `obj`'s field satisfies the term."""
        return (field_value(obj, self.path) == self.value) == self.equal


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: every term must hold."""

    terms: tuple[FieldTerm, ...] = ()

    def matches(self, obj: dict[str, Any]) -> bool:
        """Whether `obj` satisfies every term."""
        return all(term.matches(obj) for term in self.terms)


def field_value(obj: dict[str, Any], path: str) -> str:
    """The field at dotted `path` as a selector compares it: "" when absent."""
    value: Any = obj
    for part in FIELD_ALIASES.get(path, path).split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def supported_fields(info: KindInfo | None) -> tuple[str, ...]:
    """The field paths a selector may name for `info`'s kind (any kind: metadata only)."""
    return COMMON_FIELDS + (info.field_selectors if info is not None else ())


def parse_fields(text: str | None, info: KindInfo | None) -> FieldSelector:
    """`metadata.name=x,status.phase!=Ready` as a FieldSelector for `info`'s kind.

    BadRequestError for a malformed term or a field the kind does not select on.
    """
    terms = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        found = re.match(r"^\s*([^=!\s]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not found:
            raise BadRequestError(f"invalid selector: {part!r}; can't understand it")
        path, op, value = found.groups()
        if path not in supported_fields(info):
            raise BadRequestError(f"field label not supported: {path}")
        terms.append(FieldTerm(path, op != "!=", value))
    return FieldSelector(tuple(terms))


@dataclass(frozen=True)
class Matcher:
    """One test of an object against a label and a field selector."""

    labels: LabelSelector
    fields: FieldSelector

    @property
    def everything(self) -> bool:
        """Whether every object matches (neither selector has a term): no object need be read
        to tell."""
        return not self.labels.requirements and not self.fields.terms

    def __call__(self, obj: dict[str, Any]) -> bool:
        """Whether `obj` matches both selectors."""
        meta = obj.get("metadata") or {}
        return self.labels.matches(meta.get("labels") or {}) and self.fields.matches(obj)


def matcher(labels: LabelSelector, fields: FieldSelector) -> Matcher:
    """One test of an object against both selectors."""
    return Matcher(labels, fields)
