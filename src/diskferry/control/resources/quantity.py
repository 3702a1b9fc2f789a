"""Kubernetes quantities of bytes: "64Mi", "1G", "1.5Gi", "100" parsed, and bytes written back."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from diskferry.base.errors import DiskferryError

BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL = {"k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
FORMAT = re.compile(r"^(\+?(?:\d+(?:\.\d*)?|\.\d+))([KMGTPE]i|[kMGTPE]|[eE][-+]?\d+)?$")
"""A number and an optional suffix; the pattern is also the CRD's, so no named groups."""


class QuantityError(DiskferryError, ValueError):
    """A text that is not a quantity of bytes."""

    reason = "InvalidQuantity"


def parse_quantity(text: str | int) -> int:
    """The bytes a quantity means, a fraction of a byte rounded up as Kubernetes does.

    Accepts a plain number ("100", 100), a decimal suffix (k, M, G, T, P, E), a binary one
    (Ki ... Ei) or an exponent ("1e9"); refuses negatives, milli-units and anything else.
    """
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise QuantityError(f"{text!r} is not a quantity: give a number of bytes or e.g. 64Mi")
    if isinstance(text, int):
        if text < 0:
            raise QuantityError(f"{text} is negative: a size must be at least 0")
        return text
    if text.startswith("-"):
        raise QuantityError(f"{text!r} is negative: a size must be at least 0")
    match = FORMAT.match(text)
    if match is None:
        raise QuantityError(
            f"{text!r} is not a quantity: give bytes as a number with an optional "
            "suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024) or k, M, G, T, P, E (of 1000)"
        )
    try:
        number = Decimal(match[1])
    except InvalidOperation:
        raise QuantityError(f"{text!r} is not a quantity") from None
    suffix = match[2] or ""
    if suffix in BINARY:
        value = number * (1024 ** BINARY[suffix])
    elif suffix in DECIMAL:
        value = number.scaleb(DECIMAL[suffix])
    elif suffix:
        exponent = int(suffix[1:])
        if exponent > 30:
            raise QuantityError(f"{text!r} is too large a quantity")
        value = number.scaleb(exponent)
    else:
        value = number
    return math.ceil(value)


def format_bytes(size: int) -> str:
    """`size` as Kubernetes writes a binary quantity: the largest 1024-power suffix that is exact.

    67108864 is "64Mi", 1610612736 is "1536Mi", 1000 is "1000", 1500000000 is "1500000000".
    """
    if size < 0:
        raise QuantityError(f"{size} is negative: a size must be at least 0")
    suffixes = ["", *BINARY]
    power = 0
    while size and size % 1024 == 0 and power < len(suffixes) - 1:
        size //= 1024
        power += 1
    return f"{size}{suffixes[power]}"
