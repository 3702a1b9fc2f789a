"""Sizes as users write them: plain bytes or K M G T (and Ki Mi Gi Ti), all binary."""

import re
from fractions import Fraction

from diskferry.base.errors import DiskferryError

_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]?)(i?)[Bb]?\s*$", re.IGNORECASE)


class SizeError(DiskferryError):
    """A size string could not be read."""

    reason = "BadSize"


def parse_size(text: str) -> int:
    """Bytes named by `text`: '512M', '512Mi' and '536870912' are all 536870912."""
    match = _PATTERN.match(text)
    if not match:
        raise SizeError(f"cannot read size {text!r}: use bytes or a number with K, M, G or T")
    number, unit, _ = match.groups()
    value = Fraction(number) * (1024 ** _UNITS[unit.upper()])
    if value.denominator != 1:
        raise SizeError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: float) -> str:
    """A short human form of a byte count, binary units."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
