"""The label selector language as Kubernetes parses it (`app=web,tier in (a,b),!legacy`),
matched against an object's labels."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from diskferry.control.errors import BadRequestError

TOKEN = re.compile(r"\s*(==|!=|=|!|\(|\)|,|<|>|[^\s=!(),<>]+)")
NAME = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)"
KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{NAME}$")
VALUE = re.compile(rf"^{NAME}?$")
SET_OPERATORS = ("in", "notin")

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
