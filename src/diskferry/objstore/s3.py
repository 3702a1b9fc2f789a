"""An S3 bucket and prefix as an object store, through obstore: every put is whole or nothing."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any, BinaryIO

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    GenericError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)
from obstore.store import S3Store

from diskferry.objstore.backend import Data, ObjectInfo, OnForeign
from diskferry.objstore.errors import (
    BucketNotFoundError,
    CredentialsRefusedError,
    ObjectNotFoundError,
    ObjectStoreError,
    ObjectTooLargeError,
)
from diskferry.objstore.s3_options import S3Options

_READ_BACK = 8 << 20
_REFUSED_MARKERS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403 Forbidden")
_UNTRUSTED = re.compile(r"InvalidCertificate\(\s*(\w+)")


class S3Backend:
    """Objects under `s3://bucket/prefix`; safe to call from several threads at once."""

    def __init__(self, url: str, bucket: str, prefix: str, opts: S3Options) -> None:
        self.url = url
        self.bucket = bucket
        self._store = _s3_store(bucket, prefix, opts)

    def put(self, path: str, data: Data) -> None:
        """Write the object whole: S3 shows it only once it is complete."""
        with self._errors(path):
            sent = obstore.put(self._store, path, memoryview(data), use_multipart=False)
        self._verify(path, hashlib.md5(data, usedforsecurity=False), sent)

    def put_parts(self, path: str, parts: Sequence[Data]) -> None:
        """`put` of the parts joined: one request, whole."""
        self.put(path, b"".join(parts))

    def put_file(self, path: str, file: BinaryIO) -> None:
        """Write the object from an open file, in 8 MiB parts two at a time (multipart)."""
        digest = hashlib.md5(usedforsecurity=False)
        start = file.tell()
        while block := file.read(_READ_BACK):
            digest.update(block)
        file.seek(start)
        with self._errors(path):
            sent = obstore.put(self._store, path, file, chunk_size=8 << 20, max_concurrency=2)
        self._verify(path, digest, sent)

    def put_new(self, path: str, data: Data) -> bool:
        """Write the object only if none exists (If-None-Match); False when one did."""
        with self._errors(path):
            try:
                sent = obstore.put(
                    self._store, path, memoryview(data), mode="create", use_multipart=False
                )
            except AlreadyExistsError:
                return False
        self._verify(path, hashlib.md5(data, usedforsecurity=False), sent)
        return True

    def replace(self, path: str, data: Data) -> bool:
        """Overwrite the object only while it exists: a put conditional on the ETag just read.

        A deletion between the head and the put fails the put (If-Match); a server that
        gives no ETag gets a plain put, and a deletion in that moment is overwritten.
        """
        info = self._head(path)
        if info is None:
            return False
        mode: Any = {"e_tag": info["e_tag"]} if info.get("e_tag") else "overwrite"
        with self._errors(path):
            try:
                sent = obstore.put(
                    self._store, path, memoryview(data), mode=mode, use_multipart=False
                )
            except PreconditionError:
                return False
        self._verify(path, hashlib.md5(data, usedforsecurity=False), sent)
        return True

    def _verify(self, path: str, digest: Any, sent: Any) -> None:
        """Make sure the store kept what was sent; remove and refuse an object damaged on the way.

        A single-part object's ETag is the MD5 of its bytes; where it is not (multipart,
        SSE-KMS), the object is read back.
        """
        if (sent.get("e_tag") or "").strip('"') == digest.hexdigest():
            return
        kept = hashlib.md5(usedforsecurity=False)
        with self._errors(path):
            for block in obstore.get(self._store, path).stream(min_chunk_size=_READ_BACK):
                kept.update(block)
        if kept.digest() != digest.digest():
            self.delete(path)
            raise ObjectStoreError(
                f"{self.url}: {path}: the store kept other bytes than were sent "
                "(damaged on the way); the object was removed",
                reason="DamagedInTransit",
            )

    def get(self, path: str, limit: int) -> bytes:
        """The whole object, at most `limit` bytes: a GET of its first `limit` + 1 bytes, whose
        answer gives the object's size before any of it is read, then streamed."""
        with self._errors(path):
            try:
                got = obstore.get(self._store, path, options={"range": (0, limit + 1)})
            except GenericError:
                # S3 answers 416 for any range of an empty object, which has no first byte
                if self._empty(path):
                    return b""
                raise
            size = got.meta["size"]
            if size <= limit:
                pieces = list(got.stream(min_chunk_size=_READ_BACK))
                size = sum(map(len, pieces))
                if size <= limit:
                    return b"".join(pieces)
        raise ObjectTooLargeError(self.url, path, size=size, limit=limit)

    def _empty(self, path: str) -> bool:
        info = self._head(path)
        return info is not None and info["size"] == 0

    def get_range(self, path: str, start: int, length: int) -> bytes:
        """Up to `length` bytes of the object from `start`."""
        with self._errors(path):
            return obstore.get_range(self._store, path, start=start, length=length).to_bytes()

    def head(self, path: str) -> ObjectInfo | None:
        """What S3 says of the object, or None when it does not exist."""
        meta = self._head(path)
        if meta is None:
            return None
        return ObjectInfo(meta["path"], meta["size"], meta["last_modified"])

    def _head(self, path: str) -> Any:
        try:
            with self._errors(path):
                return obstore.head(self._store, path)
        except ObjectNotFoundError:
            return None

    def list(self, folder: str, foreign: OnForeign | None = None) -> Iterator[ObjectInfo]:
        """Every object under `folder` (a bucket holds nothing but objects: `foreign` is never
        called)."""
        with self._errors(folder):
            for batch in obstore.list(self._store, folder or None, chunk_size=1000):
                for meta in batch:
                    yield ObjectInfo(meta["path"], meta["size"], meta["last_modified"])

    def empty(self) -> bool:
        """Whether no object is under the prefix."""
        return next(self.list(""), None) is None

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
        untrusted = _UNTRUSTED.search(text)
        if untrusted:
            return ObjectStoreError(
                f"{self.url}: the endpoint's TLS certificate is not trusted "
                f"({untrusted.group(1)}): give the certificate of the CA that signed it",
                reason="CertificateNotTrusted",
            )
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
    config["checksum_algorithm"] = "SHA256"
    if opts.access_key_id:
        config["access_key_id"] = opts.access_key_id
    if opts.secret_access_key:
        config["secret_access_key"] = opts.secret_access_key
    client: dict[str, Any] = {"allow_http": bool(endpoint and endpoint.startswith("http://"))}
    if opts.ca_bundle is not None:
        client["root_certificate"] = opts.ca_bundle
    retry = {"max_retries": 3, "retry_timeout": timedelta(seconds=30)}
    try:
        return S3Store(
            bucket, prefix=prefix or None, client_options=client, retry_config=retry, **config
        )
    except ValueError as e:
        if opts.ca_bundle is None or "root_certificate" not in str(e):
            raise
        raise ObjectStoreError(
            "the CA bundle holds no PEM certificate: give the CA's certificate, -----BEGIN "
            "CERTIFICATE----- and all",
            reason="BadCaBundle",
        ) from None
