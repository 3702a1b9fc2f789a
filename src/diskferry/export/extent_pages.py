"""Extents as paged JSON in the shared backup-map shape."""

from __future__ import annotations

from itertools import islice
from typing import Any

from diskferry.disk.extent import Extent, merge_adjacent
from diskferry.disk.extent_map import ExtentMapError
from diskferry.disk.extent_map import parse_page as read_page
from diskferry.disk.volume import ExtentContext, Volume
from diskferry.export.errors import DownloadError

PAGE_SIZE = 512


def extent_page(
    volume: Volume,
    context: ExtentContext = "zero",
    offset: int = 0,
    length: int | None = None,
    page_size: int = PAGE_SIZE,
) -> dict[str, Any]:
    """Up to `page_size` extents from `offset`; `next_offset` is where the next page starts."""
    end = volume.size if length is None else min(volume.size, offset + length)
    merged = merge_adjacent(volume.extents(context, offset, max(0, end - offset)))
    page = list(islice(merged, page_size + 1))
    next_offset = None
    if len(page) > page_size:
        next_offset = page[page_size].start
        page = page[:page_size]
    return {"extents": [e.to_json() for e in page], "next_offset": next_offset}


def parse_page(body: bytes | str) -> tuple[list[Extent], int | None]:
    """The extents and next offset of one page, from the JSON a server sent (DownloadError
    when it is not in the shape)."""
    try:
        return read_page(body)
    except ExtentMapError as e:
        raise DownloadError(e.message) from None
