"""The export token: read from its file on every request, compared in constant time."""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from diskferry.disk.point_volume import TOKEN_HEADER as TOKEN_HEADER
from diskferry.export.errors import ExportError


class TokenFile:
    """The token in a file; rotating the file rotates the token."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.read()

    def read(self) -> str:
        """The current token, whitespace stripped."""
        try:
            token = self.path.read_text().strip()
        except OSError as e:
            raise ExportError(f"cannot read the token file {self.path}: {e.strerror}") from e
        if not token:
            raise ExportError(f"the token file {self.path} is empty: write a token into it")
        return token

    def accepts(self, offered: str | None) -> bool:
        """Whether `offered` is the current token."""
        if offered is None:
            return False
        return hmac.compare_digest(offered.encode(), self.read().encode())
