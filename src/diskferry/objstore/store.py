"""ObjectStore: put, get, ranges, head, list and delete on a directory or `s3://bucket/prefix`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, BinaryIO
from urllib.parse import urlparse

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from obstore.store import LocalStore, S3Store

from diskferry.objstore.errors import (
    BucketNotFoundError,
    CredentialsRefusedError,
    ObjectNotFoundError,
    ObjectStoreError,
)

_REFUSED_MARKERS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden")


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a listing or head says of one object."""

    path: str
    size: int
    modified: datetime


@dataclass(frozen=True, slots=True)
class S3Options:
    """Explicit S3 settings; any left None comes from the usual AWS_* environment variables."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None


class ObjectStore:
    """Whole objects under a root; safe to call from several threads at once."""

    def __init__(self, url: str, s3: S3Options | None = None, *, create: bool = True) -> None:
        """Open the store at `url`; a missing directory is made, or refused when not `create`."""
        self.url = url
        parsed = urlparse(url)
        if parsed.scheme == "s3":
            self._store: Any = _s3_store(parsed.netloc, parsed.path.strip("/"), s3 or S3Options())
            self.bucket: str | None = parsed.netloc
        elif parsed.scheme in ("", "file"):
            root = os.path.abspath(parsed.path if parsed.scheme == "file" else url)
            if not create and not os.path.isdir(root):
                raise ObjectNotFoundError(f"{url} does not exist")
            self._store = LocalStore(prefix=root, mkdir=True)
            self.bucket = None
        else:
            raise ObjectStoreError(
                f"cannot use {url!r} as a store: give a directory or s3://bucket/prefix",
                reason="BadStoreURL",
            )

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    def put(self, path: str, data: bytes | bytearray | memoryview) -> None:
        """Write the object whole: readers see the old object or the new one, never a part."""
        with self._errors(path):
            obstore.put(self._store, path, memoryview(data), use_multipart=False)

    def put_file(self, path: str, file: BinaryIO) -> None:
        """Write the object whole from an open file, as `put` does, holding only a few parts of it.

        A large file goes up in 8 MiB parts, two at once (S3 multipart; a directory stages
        it beside the object and renames it over).
        """
        with self._errors(path):
            obstore.put(self._store, path, file, chunk_size=8 << 20, max_concurrency=2)

    def put_new(self, path: str, data: bytes | bytearray | memoryview) -> bool:
        """Write the object only if none exists under `path`; False when one did."""
        with self._errors(path):
            try:
                obstore.put(self._store, path, memoryview(data), mode="create", use_multipart=False)
            except AlreadyExistsError:
                return False
        return True

    def get(self, path: str) -> bytes:
        """The whole object."""
        with self._errors(path):
            return obstore.get(self._store, path).bytes().to_bytes()

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """`length` bytes of the object from `start`."""
        with self._errors(path):
            got = obstore.get_range(self._store, path, start=start, length=length).to_bytes()
        if len(got) != length:
            raise ObjectStoreError(
                f"{self.url}: {path} is shorter than expected (wanted {length} bytes at {start})",
                reason="ShortObject",
            )
        return got

    def get_start(self, path: str, length: int) -> bytes:
        """The first `length` bytes of the object, or all of it when it is shorter."""
        with self._errors(path):
            return obstore.get_range(self._store, path, start=0, length=length).to_bytes()

    def head(self, path: str) -> ObjectInfo | None:
        """What the store says of the object, or None when it does not exist."""
        try:
            with self._errors(path):
                meta = obstore.head(self._store, path)
        except ObjectNotFoundError:
            return None
        return ObjectInfo(meta["path"], meta["size"], meta["last_modified"])

    def exists(self, path: str) -> bool:
        """Whether the object exists."""
        return self.head(path) is not None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object under `prefix` (a folder: `packs/` and `packs` list the same)."""
        folder = prefix.rstrip("/")
        with self._errors(prefix):
            for batch in obstore.list(self._store, folder or None, chunk_size=1000):
                for meta in batch:
                    yield ObjectInfo(meta["path"], meta["size"], meta["last_modified"])

    def delete(self, path: str) -> None:
        """Remove the object; a missing one is not an error."""
        try:
            with self._errors(path):
                obstore.delete(self._store, path)
        except ObjectNotFoundError:
            pass

    @contextlib.contextmanager
    def _errors(self, path: str) -> Iterator[None]:
        """Turn obstore's exceptions into the typed errors of this package."""
        try:
            yield
        except ObjectStoreError:
            raise
        except Exception as exc:
            raise self._translate(exc, path) from None

    def _translate(self, exc: Exception, path: str) -> ObjectStoreError:
        text = str(exc)
        if "NoSuchBucket" in text:
            return BucketNotFoundError(
                f"bucket {self.bucket!r} does not exist: create it or fix the URL"
            )
        if isinstance(exc, PermissionDeniedError | UnauthenticatedError) or any(
            m in text for m in _REFUSED_MARKERS
        ):
            return CredentialsRefusedError(
                f"{self.url}: the store refused the credentials: check AWS_ACCESS_KEY_ID "
                "and AWS_SECRET_ACCESS_KEY"
            )
        if isinstance(exc, FileNotFoundError | NotFoundError):
            return ObjectNotFoundError(f"{self.url}: {path} does not exist")
        first = text.split("\n")[0][:300]
        return ObjectStoreError(f"{self.url}: {path}: {first}")


def _s3_store(bucket: str, prefix: str, opts: S3Options) -> S3Store:
    if not bucket:
        raise ObjectStoreError("an S3 URL needs a bucket: s3://bucket/prefix", reason="BadStoreURL")
    config: dict[str, Any] = {}
    endpoint = (
        opts.endpoint or os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")
    )
    if endpoint:
        config["endpoint"] = endpoint
    region = opts.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    config["region"] = region or "us-east-1"
    if opts.access_key_id:
        config["access_key_id"] = opts.access_key_id
    if opts.secret_access_key:
        config["secret_access_key"] = opts.secret_access_key
    client = {"allow_http": bool(endpoint and endpoint.startswith("http://"))}
    retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}
    return S3Store(
        bucket, prefix=prefix or None, client_options=client, retry_config=retry, **config
    )
