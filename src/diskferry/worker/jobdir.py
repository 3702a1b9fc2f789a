"""The watch that cancels a job whose directory is removed under it.

A worker outlives its daemon by design, but not its data: once the directory of its job file
is gone (the daemon stopped for good and its data directory deleted), nothing will read its
result and whatever it serves is stale. A thread looks every CHECK_SECONDS at the directory's
link count, through a descriptor opened on it at start (so a new directory at the same path
is not taken for it), and at 0 sets the job's cancel, as SIGTERM does.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from types import TracebackType

log = logging.getLogger("diskferry.worker")
CHECK_SECONDS = 2.0


class JobDirectoryWatch:
    """Sets `cancel` once `directory` is removed, while the block runs."""

    def __init__(self, directory: Path, cancel: threading.Event) -> None:
        self.directory = directory
        self._cancel = cancel
        self._done = threading.Event()
        self._fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        self._thread = threading.Thread(target=self._watch, name="job-dir-watch", daemon=True)

    def __enter__(self) -> JobDirectoryWatch:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()
        os.close(self._fd)

    def _watch(self) -> None:
        while not self._done.wait(CHECK_SECONDS):
            if os.fstat(self._fd).st_nlink == 0:
                log.warning("the job directory %s was removed: cancelling", self.directory)
                self._cancel.set()
                return
