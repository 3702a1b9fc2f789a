"""Sizes as users write them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diskferry.disk.sizes import SizeError, format_size, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512M", 536870912),
        ("512Mi", 536870912),
        ("512MiB", 536870912),
        ("536870912", 536870912),
        ("1K", 1024),
        ("1k", 1024),
        ("2G", 2 << 30),
        ("2Gi", 2 << 30),
        ("1T", 1 << 40),
        ("1.5G", 3 << 29),
        (" 4 M ", 4 << 20),
        ("0", 0),
        ("123456789123456789", 123456789123456789),
        ("0.5K", 512),
    ],
)
def test_sizes_read_as_binary_units(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "M", "12Q", "-1M", "1.5", "0.1K", "ten", "1MM"])
def test_unreadable_sizes_are_refused(text):
    with pytest.raises(SizeError):
        parse_size(text)


@given(st.integers(0, 1 << 64), st.sampled_from(["", "K", "M", "G", "Ki", "Mi", "Gi"]))
def test_whole_numbers_with_any_unit(n, unit):
    scale = 1024 ** {"": 0, "K": 1, "M": 2, "G": 3}[unit[:1]]
    assert parse_size(f"{n}{unit}") == n * scale


def test_format_size():
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.5 KiB"
    assert format_size(3 << 30) == "3.0 GiB"
    assert format_size(5 << 50) == "5120.0 TiB"
