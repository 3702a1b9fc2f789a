"""Range headers and extent pages, checked over many inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from diskferry.disk.file_volume import FileVolume
from diskferry.export.extent_pages import extent_page, parse_page
from diskferry.export.ranges import UnsatisfiableRange, parse_range


@given(
    size=st.integers(0, 10_000),
    first=st.one_of(st.none(), st.integers(0, 12_000)),
    last=st.one_of(st.none(), st.integers(0, 12_000)),
)
def test_parse_range_stays_inside_the_resource(
    size: int, first: int | None, last: int | None
) -> None:
    header = f"bytes={'' if first is None else first}-{'' if last is None else last}"
    try:
        got = parse_range(header, size)
    except UnsatisfiableRange:
        assert (first is not None and first >= size) or (first is None and (last == 0 or size == 0))
        return
    if got is None:
        assert (first is None and last is None) or (
            first is not None and last is not None and last < first
        )
        return
    start, end = got
    assert 0 <= start < end <= size
    if first is not None:
        assert start == first and end == (size if last is None else min(size, last + 1))
    else:
        assert end == size and end - start == min(size, last)


@pytest.mark.parametrize("header", ["", "bytes=0-1,5-6", "items=0-5", "bytes=abc", "bytes=-"])
def test_headers_that_are_not_one_range_are_ignored(header: str) -> None:
    assert parse_range(header, 100) is None


def test_pages_cover_the_volume_in_order(tmp_path: Path) -> None:
    path = tmp_path / "v.img"
    with open(path, "wb") as f:
        f.truncate(64 << 20)
        for n in range(0, 64, 4):
            f.seek(n << 20)
            f.write(b"x" * 4096)
    with FileVolume(path) as vol:
        whole, nxt = parse_page(json.dumps(extent_page(vol)))
        assert nxt is None and len(whole) == 32
        pages, offset = [], 0
        while offset is not None:
            page, offset = parse_page(json.dumps(extent_page(vol, offset=offset, page_size=5)))
            assert len(page) <= 5
            pages += page
        assert pages == whole
        clipped, _ = parse_page(json.dumps(extent_page(vol, offset=1000, length=10_000)))
        assert clipped[0].start == 1000 and sum(e.length for e in clipped) == 10_000
