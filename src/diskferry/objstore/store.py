"""ObjectStore: put, get, ranges, head, list and delete on a directory or `s3://bucket/prefix`."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterator, Sequence
from typing import BinaryIO
from urllib.parse import urlparse

from diskferry.objstore.backend import Backend, Data, ObjectInfo, OnForeign
from diskferry.objstore.errors import ObjectStoreError
from diskferry.objstore.local import LocalBackend
from diskferry.objstore.s3_options import S3Options

__all__ = ["ObjectInfo", "ObjectStore", "S3Options"]


def _unchecked() -> None:
    """The check of a store that no one guards."""


class ObjectStore:
    """Whole objects under a root; safe to call from several threads at once.

    A directory is written through the project's own durable backend (fsync before
    rename, see objstore.local); S3 through obstore.
    """

    def __init__(self, url: str, s3: S3Options | None = None, *, create: bool = True) -> None:
        """Open the store at `url`; a missing directory is made, or refused when not `create`."""
        self.url = url
        self._check: Callable[[], None] = _unchecked
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            from diskferry.objstore.s3 import S3Backend  # obstore: loaded only for S3

            bucket, prefix = parsed.netloc, parsed.path.strip("/")
            self._backend: Backend = S3Backend(url, bucket, prefix, s3 or S3Options())
            self.bucket: str | None = bucket
        elif parsed.scheme in ("", "file"):
            root = os.path.abspath(parsed.path if parsed.scheme == "file" else url)
            self._backend = LocalBackend(url, root, create=create)
            self.bucket = None
        else:
            raise ObjectStoreError(
                f"cannot use {url!r} as a store: give a directory or s3://bucket/prefix",
                reason="BadStoreURL",
            )

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    def guarded(self, check: Callable[[], None]) -> ObjectStore:
        """The same store, calling `check` before every operation (what it raises stops it)."""
        view = copy.copy(self)
        view._check = check
        return view

    def put(self, path: str, data: Data) -> None:
        """Write the object whole: readers see the old object or the new one, never a part."""
        self._check()
        self._backend.put(path, data)

    def put_parts(self, path: str, parts: Sequence[Data]) -> None:
        """Write the object whole, as `put` does, from parts that are not joined in memory."""
        self._check()
        self._backend.put_parts(path, parts)

    def put_file(self, path: str, file: BinaryIO) -> None:
        """Write the object whole from an open file, as `put` does, holding a few parts of it."""
        self._check()
        self._backend.put_file(path, file)

    def put_new(self, path: str, data: Data) -> bool:
        """Write the object only if none exists under `path`; False when one did."""
        self._check()
        return self._backend.put_new(path, data)

    def replace(self, path: str, data: Data) -> bool:
        """Overwrite the object only while it exists; False (nothing written) when it is gone."""
        self._check()
        return self._backend.replace(path, data)

    def get(self, path: str, *, limit: int) -> bytes:
        """The whole object, when it is at most `limit` bytes long; a longer one is refused with
        ObjectTooLargeError before any of it is read, so that no object, whoever wrote it, takes
        more of the reader's memory than the reader allows."""
        self._check()
        return self._backend.get(path, limit)

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """`length` bytes of the object from `start`."""
        self._check()
        got = self._backend.get_range(path, start, length)
        if len(got) != length:
            raise ObjectStoreError(
                f"{self.url}: {path} is shorter than expected (wanted {length} bytes at {start})",
                reason="ShortObject",
            )
        return got

    def get_start(self, path: str, length: int) -> bytes:
        """The first `length` bytes of the object, or all of it when it is shorter."""
        self._check()
        return self._backend.get_range(path, 0, length)

    def head(self, path: str) -> ObjectInfo | None:
        """What the store says of the object, or None when it does not exist."""
        self._check()
        return self._backend.head(path)

    def exists(self, path: str) -> bool:
        """Whether the object exists."""
        return self.head(path) is not None

    def list(self, prefix: str = "", foreign: OnForeign | None = None) -> Iterator[ObjectInfo]:
        """Every object under `prefix` (a folder: `packs/` and `packs` list the same); an entry
        that is no object (a link, a FIFO) raises ForeignEntryError, or is handed to `foreign`
        and skipped."""
        self._check()
        return self._backend.list(prefix.rstrip("/"), foreign)

    def empty(self) -> bool:
        """Whether nothing is under the root: no object, and (a directory) no file of any kind."""
        self._check()
        return self._backend.empty()

    def delete(self, path: str) -> None:
        """Remove the object; a missing one is not an error."""
        self._check()
        self._backend.delete(path)
