"""Extents as paged JSON in the shared backup-map shape."""

from __future__ import annotations

from itertools import islice
from typing import Any

from diskferry.disk.extent import Extent, merge_adjacent
from diskferry.disk.volume import ExtentContext, Volume

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


def parse_page(body: dict[str, Any]) -> tuple[list[Extent], int | None]:
    """The extents and next offset of one page as a server sent it."""
    extents = []
    for item in body["extents"]:
        kind = item["type"]
        extents.append(
            Extent(
                int(item["offset"]),
                int(item["length"]),
                zero=kind == "zero",
                dirty=True if kind == "dirty" else None,
            )
        )
    nxt = body.get("next_offset")
    return extents, None if nxt is None else int(nxt)
