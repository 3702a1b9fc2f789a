"""What an object store backend does (a directory, S3), and what it says of one object."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import BinaryIO, Protocol

from diskferry.objstore.errors import ForeignEntryError

# what a listing calls with each entry that is not an object, which it then skips
OnForeign = Callable[[ForeignEntryError], None]


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or head says of one object."""

    path: str
    size: int
    modified: datetime


Data = bytes | bytearray | memoryview


class Backend(Protocol):
    """Whole objects under a root, named by `/`-separated paths; raises the typed store errors."""

    def put(self, path: str, data: Data) -> None:
        """Write the object whole, durably, before returning."""

    def put_parts(self, path: str, parts: Sequence[Data]) -> None:
        """Write the object whole, durably, as the parts one after another."""

    def put_file(self, path: str, file: BinaryIO) -> None:
        """Write the object whole, durably, from an open file read in pieces."""

    def put_new(self, path: str, data: Data) -> bool:
        """Write the object only if none exists under `path`; False when one did."""

    def replace(self, path: str, data: Data) -> bool:
        """Overwrite the object only while it exists; False (nothing written) when it is gone."""

    def get(self, path: str, limit: int) -> bytes:
        """The whole object; ObjectTooLargeError, before any of it is read, when it is longer
        than `limit` bytes."""

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """Up to `length` bytes of the object from `start` (fewer past its end)."""

    def head(self, path: str) -> ObjectInfo | None:
        """What the store says of the object, or None when it does not exist."""

    def list(self, folder: str, foreign: OnForeign | None = None) -> Iterator[ObjectInfo]:
        """Every object under `folder` ("" for all); an entry that is not an object (a link, a
        FIFO) raises ForeignEntryError, or with `foreign`, is handed to it and skipped."""

    def empty(self) -> bool:
        """Whether nothing is under the root."""

    def delete(self, path: str) -> None:
        """Remove the object durably; a missing one is not an error."""
