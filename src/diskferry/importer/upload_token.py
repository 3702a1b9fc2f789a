"""The upload token: read from its file for each upload, compared in constant time, expiring."""

from __future__ import annotations

import datetime
import hmac
import os
from pathlib import Path

from diskferry.base.errors import DiskferryError


class UploadTokenError(DiskferryError):
    """The token file cannot be read or holds no token."""

    reason = "BadTokenFile"


class UploadToken:
    """The token in a file (first line) and when it expires (optional second line, RFC 3339)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.read()

    def read(self) -> tuple[str, datetime.datetime | None]:
        """The current token and its expiry."""
        try:
            lines = self.path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as e:
            why = getattr(e, "strerror", None) or "not text"
            raise UploadTokenError(f"cannot read the token file {self.path}: {why}") from e
        token = lines[0].strip() if lines else ""
        if not token:
            raise UploadTokenError(f"the token file {self.path} is empty: write a token into it")
        expires = None
        if len(lines) > 1 and lines[1].strip():
            try:
                expires = datetime.datetime.fromisoformat(lines[1].strip())
            except ValueError as e:
                raise UploadTokenError(
                    f"the second line of {self.path} is not an RFC 3339 time"
                ) from e
            if expires.tzinfo is None:
                expires = expires.replace(tzinfo=datetime.UTC)
        return token, expires

    def accepts(self, offered: str) -> bool:
        """Whether `offered` is the current token and it has not expired."""
        token, expires = self.read()
        matches = hmac.compare_digest(offered.encode(), token.encode())
        return matches and (expires is None or datetime.datetime.now(datetime.UTC) < expires)
