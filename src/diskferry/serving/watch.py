"""FileWatch: notices when any of a few files appears, disappears or changes."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_Signature = tuple[tuple[int, int, int] | None, ...]


class FileWatch:
    """Compares the files' (inode, size, mtime) with what was seen at the last look."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        self.paths = [Path(p) for p in paths]
        self._seen: _Signature | None = None

    def _signature(self) -> _Signature:
        sig = []
        for path in self.paths:
            try:
                st = path.stat()
            except OSError:
                sig.append(None)
            else:
                sig.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(sig)

    def changed(self) -> bool:
        """Whether the files differ from the last look (True the first time)."""
        sig = self._signature()
        if sig == self._seen:
            return False
        self._seen = sig
        return True
