"""Durations as Kubernetes writes them (Go's `time.Duration`): "2h", "1h30m", "90s", "1.5s"."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

from diskferry.base.errors import DiskferryError

UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
PART = r"(\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)"
FORMAT = re.compile(rf"^({PART})+$|^0$")
PARTS = re.compile(PART)


class DurationError(DiskferryError, ValueError):
    """A text that is not a duration."""

    reason = "InvalidDuration"


def parse_duration(text: str) -> timedelta:
    """The time `text` names, as Go's `time.ParseDuration` reads it (no negatives)."""
    if not FORMAT.match(text):
        raise DurationError(
            f"{text!r} is not a duration: give numbers with units h, m, s, ms, e.g. 2h or 1h30m"
        )
    seconds = sum((Decimal(m[1]) * UNITS[m[3]] for m in PARTS.finditer(text)), Decimal(0))
    return timedelta(seconds=float(seconds))


def format_duration(value: timedelta) -> str:
    """`value` as Go writes a duration: "2h0m0s", "1m30s", "1.5s", "0s"."""
    micros = round(value.total_seconds() * 1_000_000)
    if 0 < micros < 1_000_000:
        return f"{micros // 1000}ms" if micros % 1000 == 0 else f"{micros}µs"
    hours, micros = divmod(micros, 3_600_000_000)
    minutes, micros = divmod(micros, 60_000_000)
    seconds = _decimal(Decimal(micros) / 1_000_000)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{minutes}m{seconds}s"
    return f"{seconds}s"


def _decimal(number: Decimal) -> str:
    text = f"{number:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
