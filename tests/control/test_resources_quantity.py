"""Quantities of bytes read as Kubernetes reads them and written as Deckhouse writes capacity."""

import pytest

from diskferry.control.resources.quantity import QuantityError, format_bytes, parse_quantity


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("64Mi", 64 * 1024**2),
        ("1G", 10**9),
        ("1.5Gi", 1536 * 1024**2),
        ("100", 100),
        (100, 100),
        ("1e3", 1000),
        (".5Ki", 512),
        ("0.5", 1),
        ("2Ti", 2 * 1024**4),
        ("3k", 3000),
    ],
)
def test_parse(text: str | int, size: int) -> None:
    assert parse_quantity(text) == size


@pytest.mark.parametrize("text", ["", "Mi", "1x", "1 Gi", "1m", "-1", "1Mib", "0x10", "1.2.3"])
def test_bad_refused(text: str) -> None:
    with pytest.raises(QuantityError, match=r"quantity|negative"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (64 * 1024**2, "64Mi"),
        (1536 * 1024**2, "1536Mi"),
        (1024**3, "1Gi"),
        (1000, "1000"),
        (1500000000, "1500000000"),
        (0, "0"),
        (1024**6 * 3, "3Ei"),
    ],
)
def test_format(size: int, text: str) -> None:
    assert format_bytes(size) == text


@pytest.mark.parametrize("text", ["64Mi", "1G", "1.5Gi", "100", "7Ti", "12345"])
def test_round_trip(text: str) -> None:
    size = parse_quantity(text)
    assert parse_quantity(format_bytes(size)) == size
