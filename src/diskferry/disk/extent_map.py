"""Pages of extents in the shared backup-map shape, as a client reads them: `{"extents":
[{"offset", "length", "type": data|zero|dirty}], "next_offset"}`."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, StrictInt, ValidationError

from diskferry.disk.errors import VolumeError
from diskferry.disk.extent import Extent


class ExtentMapError(VolumeError):
    """A server's page of extents is not in the shared shape."""

    reason = "BadExtentMap"


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
    """The extents and next offset of one page, from the JSON a server sent; ExtentMapError
    naming the field at fault when it is not in the shape."""
    try:
        page = _Page.model_validate_json(body)
    except ValidationError as e:
        error = e.errors(include_input=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        raise ExtentMapError(
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
