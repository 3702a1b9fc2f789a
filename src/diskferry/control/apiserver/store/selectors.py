"""Field selectors as Kubernetes parses them, and the one test of an object's JSON against a
label and a field selector."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from diskferry.control.errors import BadRequestError
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.labels import LabelSelector

COMMON_FIELDS = ("metadata.name", "metadata.namespace")
FIELD_ALIASES = {"source": "source.component"}


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
