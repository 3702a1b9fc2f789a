"""Content digests (sha256:HEX): computed whole, or checked while bytes stream."""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import Protocol

from diskferry.disk.progress import Progress
from diskferry.registry.errors import DigestMismatchError, RegistryError

_ALGORITHMS = ("sha256", "sha512")
DIGEST_FORMAT = re.compile(r"^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128})$")


class Hash(Protocol):
    """What hashlib's objects offer."""

    name: str

    def update(self, data: bytes, /) -> None: ...

    def hexdigest(self) -> str: ...


def hasher(digest: str) -> Hash:
    """A fresh hash of the algorithm `digest` names."""
    algorithm = digest.split(":", 1)[0]
    if algorithm not in _ALGORITHMS:
        raise RegistryError(f"digest {digest!r}: unsupported algorithm", reason="BadDigest")
    return hashlib.new(algorithm)


def digest_of(data: bytes, algorithm: str = "sha256") -> str:
    """`algorithm:hex` of `data`."""
    return f"{algorithm}:{hashlib.new(algorithm, data).hexdigest()}"


def verify(data: bytes, digest: str, what: str) -> None:
    """Raise DigestMismatchError unless `data` hashes to `digest`."""
    actual = digest_of(data, hasher(digest).name)
    if actual != digest:
        raise DigestMismatchError(f"{what}: the content hashes to {actual}, not {digest}")


class RawStream(Protocol):
    """A byte stream to verify: read until b'' and close."""

    def read(self, n: int = ..., /) -> bytes: ...

    def close(self) -> None: ...


class VerifiedReader:
    """The bytes of a blob, hashed as they pass; its end checks its size and digest."""

    def __init__(
        self,
        raw: RawStream,
        digest: str,
        size: int | None,
        what: str,
        progress: Progress | None = None,
    ) -> None:
        self.digest, self.size, self.what = digest, size, what
        self.bytes_read = 0
        self._raw = raw
        self._hash = hasher(digest)
        self._progress = progress
        self._verified = False

    def _read_raw(self, n: int) -> bytes:
        return self._raw.read(n)

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` bytes; at the end, DigestMismatchError unless the blob is what it claims."""
        data = self._read_raw(n)
        if data:
            self.bytes_read += len(data)
            self._hash.update(data)
            if self._progress is not None:
                self._progress.add(len(data))
            if self.size is not None and self.bytes_read > self.size:
                raise DigestMismatchError(
                    f"{self.what}: the blob is longer than its {self.size} bytes; refusing it"
                )
        elif not self._verified:
            self._verify()
        return data

    def _verify(self) -> None:
        actual = f"{self._hash.name}:{self._hash.hexdigest()}"
        if self.size is not None and self.bytes_read != self.size:
            raise DigestMismatchError(
                f"{self.what}: the blob has {self.bytes_read} bytes, not {self.size}; refusing it"
            )
        if actual != self.digest:
            raise DigestMismatchError(
                f"{self.what}: the blob hashes to {actual}; refusing it (corrupted?)"
            )
        self._verified = True

    def drain(self) -> None:
        """Read to the end, so the digest is checked."""
        while self.read(1 << 20):
            pass

    def close(self) -> None:
        """Close the underlying stream."""
        self._raw.close()


BlobOpener = Callable[[str, int | None, Progress | None, threading.Event | None], VerifiedReader]
"""Opens a blob by (digest, size, progress, cancel), verified as it streams."""
