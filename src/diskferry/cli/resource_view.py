"""Objects as `get` and `describe` print them: tables of the server's columns, ages, the
indented description with conditions and events."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from diskferry.control.apiserver.http.tables import human_duration

NONE = "<none>"
ACRONYMS = {"uid": "UID", "url": "URL", "urls": "URLs", "http": "HTTP", "api": "API", "ttl": "TTL"}


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp, or None when `value` is not one."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def human_age(since: datetime) -> str:
    """The time since `since` as kubectl writes it: 45s, 3m12s, 5h, 2d3h, 400d."""
    return human_duration((datetime.now(UTC) - since).total_seconds())


def age_of(obj: dict[str, Any]) -> str:
    """The object's age from its creationTimestamp."""
    created = parse_time(obj.get("metadata", {}).get("creationTimestamp"))
    return human_age(created) if created else "<unknown>"


def _cell(value: Any, column: dict[str, Any]) -> str:
    if value is None or value == "":
        return "" if column.get("type") != "date" else "<unknown>"
    when = parse_time(value) if column.get("type") == "date" else None
    if when is not None:
        return human_age(when)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def table_rows(
    answer: dict[str, Any], *, wide: bool, namespaces: bool
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a meta.k8s.io Table (or of plain objects, as NAME and AGE)."""
    if answer.get("kind") != "Table":
        objects = answer.get("items", [answer] if answer.get("metadata") else [])
        headers = ["NAME", "AGE"]
        rows = [[o["metadata"].get("name", ""), age_of(o)] for o in objects]
        metas = [o.get("metadata", {}) for o in objects]
    else:
        shown = [
            (i, c)
            for i, c in enumerate(answer.get("columnDefinitions", []))
            if wide or not c.get("priority")
        ]
        headers = [c["name"].upper() for _, c in shown]
        rows, metas = [], []
        for row in answer.get("rows", []):
            cells = row.get("cells", [])
            rows.append([_cell(cells[i] if i < len(cells) else None, c) for i, c in shown])
            metas.append((row.get("object") or {}).get("metadata", {}))
    if namespaces:
        headers.insert(0, "NAMESPACE")
        for row, meta in zip(rows, metas, strict=True):
            row.insert(0, meta.get("namespace", ""))
    return headers, rows


def print_table(headers: list[str], rows: Iterable[list[str]]) -> None:
    """A table as kubectl lays it out: bold headers on a terminal, no borders, no truncation."""
    table = Table(box=None, pad_edge=False, padding=(0, 3, 0, 0), show_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=True, overflow="ignore", header_style="bold")
    for row in rows:
        table.add_row(*row)
    if sys.stdout.isatty():
        Console(highlight=False).print(table)
        return
    console = Console(width=100_000, no_color=True, highlight=False)
    with console.capture() as captured:
        console.print(table)
    for line in captured.get().splitlines():
        print(line.rstrip())


def _words(key: str) -> str:
    """`persistentVolumeClaim` as describe titles it: `Persistent Volume Claim`."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", " ", key)
    words = [ACRONYMS.get(w.lower(), w[:1].upper() + w[1:]) for w in spaced.split(" ")]
    return " ".join(words)


def _block(value: Any, indent: int) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        width = max((len(_words(k)) for k in value), default=0) + 3
        for key, item in value.items():
            title = f"{_words(key)}:"
            if isinstance(item, dict | list) and item:
                lines.append(f"{pad}{title}")
                lines.extend(_block(item, indent + 1))
            else:
                lines.append(f"{pad}{title:<{width}}{_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict | list):
                nested = _block(item, indent + 1)
                lines.append(f"{pad}- {nested[0].lstrip()}" if nested else f"{pad}-")
                lines.extend(nested[1:])
            else:
                lines.append(f"{pad}{_scalar(item)}")
    return lines


def _scalar(value: Any) -> str:
    if value is None or value == {} or value == []:
        return NONE
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _pairs(mapping: dict[str, str] | None) -> list[str]:
    return [f"{k}={v}" for k, v in sorted((mapping or {}).items())] or [NONE]


def _aligned(headers: list[str], rows: list[list[str]], indent: str) -> list[str]:
    """Columns as describe lays them out: headers, dashes, rows; the last column unpadded."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = []
    for row in [headers, ["-" * len(h) for h in headers], *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
        out.append(indent + "  ".join([*cells, row[-1]]).rstrip())
    return out


def _event_lines(events: list[dict[str, Any]]) -> list[str]:
    if not events:
        return ["Events:  <none>"]
    rows = []
    for event in events:
        last = parse_time(event.get("lastTimestamp") or event.get("eventTime"))
        age = human_age(last) if last else "<unknown>"
        count = event.get("count") or 1
        if count > 1:
            first = parse_time(event.get("firstTimestamp"))
            age = f"{age} (x{count} over {human_age(first) if first else '?'})"
        source = event.get("source", {}).get("component") or event.get("reportingComponent")
        message = " ".join(event.get("message", "").split())
        rows.append([event.get("type", ""), event.get("reason", ""), age, source or "", message])
    return ["Events:", *_aligned(["Type", "Reason", "Age", "From", "Message"], rows, "  ")]


def _conditions(conditions: list[dict[str, Any]]) -> list[str]:
    headers = ["Type", "Status", "Reason", "Message"]
    rows = [[str(c.get(h.lower(), "")) for h in headers] for c in conditions]
    return ["  Conditions:", *_aligned(headers, rows, "    ")]


def describe(obj: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """The object as `kubectl describe` shows it; a Secret's data as sizes only."""
    meta = obj.get("metadata", {})
    head = [("Name", meta.get("name", ""))]
    if meta.get("namespace"):
        head.append(("Namespace", meta["namespace"]))
    lines = [f"{k + ':':<14}{v}" for k, v in head]
    for title, values in (("Labels", meta.get("labels")), ("Annotations", meta.get("annotations"))):
        pairs = _pairs(values)
        lines.append(f"{title + ':':<14}{pairs[0]}")
        lines.extend(f"{'':<14}{p}" for p in pairs[1:])
    lines.append(f"{'API Version:':<14}{obj.get('apiVersion', '')}")
    lines.append(f"{'Kind:':<14}{obj.get('kind', '')}")
    shown = ("name", "namespace", "labels", "annotations", "managedFields")
    rest = {k: v for k, v in meta.items() if k not in shown}
    lines.append("Metadata:")
    lines.extend(_block(rest, 1))
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata", "stringData"):
            continue
        if obj.get("kind") == "Secret" and key == "data":
            lines.append("Data")
            lines.append("====")
            lines.extend(f"{k}:  {_decoded_size(v)} bytes" for k, v in sorted(value.items()))
            continue
        if key == "status" and isinstance(value, dict):
            lines.append("Status:")
            plain = {k: v for k, v in value.items() if k != "conditions"}
            lines.extend(_block(plain, 1))
            if value.get("conditions"):
                lines.extend(_conditions(value["conditions"]))
            continue
        if isinstance(value, dict | list) and value:
            lines.append(f"{_words(key)}:")
            lines.extend(_block(value, 1))
        else:
            lines.append(f"{_words(key) + ':':<14}{_scalar(value)}")
    lines.extend(_event_lines(events))
    return "\n".join(lines)


def _decoded_size(encoded: str) -> int:
    padding = encoded.count("=")
    return len(encoded) * 3 // 4 - padding
