"""Extents as paged JSON in the shared backup-map shape."""

from __future__ import annotations

from itertools import islice
from typing import Any, Literal

from pydantic import BaseModel, Field, StrictInt, ValidationError

from diskferry.disk.extent import Extent, merge_adjacent
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


class _ExtentItem(BaseModel):
    """One extent of a page as it travels."""

    offset: StrictInt = Field(ge=0)
    length: StrictInt = Field(ge=0)
    type: Literal["data", "zero", "dirty"]


class _Page(BaseModel):
    """One page as it travels."""

    extents: list[_ExtentItem]
    next_offset: StrictInt | None = Field(None, ge=0)


def parse_page(body: bytes | str) -> tuple[list[Extent], int | None]:
    """The extents and next offset of one page, from the JSON a server sent."""
    try:
        page = _Page.model_validate_json(body)
    except ValidationError as e:
        error = e.errors(include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise DownloadError(
            f"the server's extents are not in the expected shape: {where or 'page'}: {error['msg']}"
        ) from None
    extents = [
        Extent(
            item.offset,
            item.length,
            zero=item.type == "zero",
            dirty=True if item.type == "dirty" else None,
        )
        for item in page.extents
    ]
    return extents, page.next_offset
