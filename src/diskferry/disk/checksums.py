"""User checksums (md5, sha1, sha256, sha512) of a stream as it is received."""

from __future__ import annotations

import hashlib
import hmac
import re

from diskferry.base.errors import DiskferryError

ALGORITHMS = ("md5", "sha1", "sha256", "sha512")
_HEX_LENGTH = {"md5": 32, "sha1": 40, "sha256": 64, "sha512": 128}


class ChecksumError(DiskferryError):
    """A checksum was malformed or did not match."""

    reason = "ChecksumMismatch"


class Checksum:
    """An expected `ALGO:HEX` and the running hash of what was received."""

    def __init__(self, spec: str) -> None:
        algo, sep, digest = spec.partition(":")
        algo = algo.strip().lower()
        digest = digest.strip().lower()
        if not sep or algo not in ALGORITHMS:
            raise ChecksumError(
                f"checksum {spec!r} is not ALGO:HEX with ALGO one of {', '.join(ALGORITHMS)}",
                reason="BadChecksum",
            )
        if not re.fullmatch(r"[0-9a-f]+", digest) or len(digest) != _HEX_LENGTH[algo]:
            raise ChecksumError(
                f"{algo} checksum must be {_HEX_LENGTH[algo]} hex digits", reason="BadChecksum"
            )
        self.algorithm = algo
        self.expected = digest
        self._hash = hashlib.new(algo)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Hash more of the stream."""
        self._hash.update(data)

    @property
    def actual(self) -> str:
        """The hex digest of what was hashed so far."""
        return self._hash.hexdigest()

    def verify(self, source: str | None = None) -> str:
        """Raise ChecksumError, naming `source` if given, unless the stream matched; 'algo:hex'."""
        if not hmac.compare_digest(self.actual, self.expected):
            where = f"{source}: " if source else ""
            raise ChecksumError(
                f"{where}{self.algorithm} checksum mismatch: "
                f"expected {self.expected}, got {self.actual}"
            )
        return f"{self.algorithm}:{self.actual}"
