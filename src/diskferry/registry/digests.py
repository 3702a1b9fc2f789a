"""Content digests (sha256:HEX) computed whole or while bytes stream."""

from __future__ import annotations

import hashlib
from typing import Protocol

from diskferry.registry.errors import DigestMismatchError, RegistryError

_ALGORITHMS = ("sha256", "sha512")


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
