"""Lock files held with flock: one holder on this host at a time, freed when it dies."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from diskferry.base.errors import DiskferryError


class Busy(DiskferryError):
    """Another diskferry process holds the lock."""

    reason = "Busy"


class HostLock:
    """An exclusive flock on `path`; its small content names what the holder runs."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd = -1

    def acquire(self) -> HostLock:
        """Take the lock now, or raise Busy."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(fd)
            raise Busy(
                f"{self.what} is in use by another diskferry process: wait for it to finish"
            ) from e
        self._fd = fd
        return self

    def read(self) -> str:
        """What the previous holder wrote."""
        return os.pread(self._fd, 4096, 0).decode(errors="replace")

    def write(self, text: str) -> None:
        """Replace the content."""
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, text.encode(), 0)

    def release(self) -> None:
        """Let go of the lock (the file stays, so no two holders ever lock different files)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
