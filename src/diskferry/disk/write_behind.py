"""Write-behind for a bulk target: each written range is sent to the disk at once and, once
a window of later writes follows it, waited for and dropped from the page cache.

Without it a copy leaves gigabytes of dirty pages for the final fsync, and a process
whose memory cgroup bounds the page cache is throttled while it writes; with it the disk
writes while the copy goes on, the fsync finds little left, and the cache stays small.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import os
import threading

from diskferry.base.libc import LIBC
from diskferry.disk.errors import VolumeError

WINDOW = 32 << 20
_WRITE = 2  # SYNC_FILE_RANGE_WRITE
_WAIT = 1 | 2 | 4  # SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER
# where the file system cannot: the data still reaches the disk at the fsync
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ESPIPE}

LIBC.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]


class WriteBehind:
    """The ranges written to one file descriptor whose writeback was started, oldest first;
    any thread may call `written`."""

    def __init__(self, fd: int, path: str, window: int = WINDOW) -> None:
        self._fd = fd
        self._path = path
        self._window = window
        self._started: collections.deque[tuple[int, int]] = collections.deque()
        self._bytes = 0
        self._lock = threading.Lock()
        self.enabled = True

    def written(self, offset: int, length: int) -> None:
        """Start writing `length` bytes at `offset` to the disk; settle the ranges that fell
        out of the window: wait for them and drop them from the cache."""
        if not self.enabled or length <= 0 or not self._sync(offset, length, _WRITE):
            return
        settled = []
        with self._lock:
            self._started.append((offset, length))
            self._bytes += length
            while self._bytes > self._window:
                old = self._started.popleft()
                self._bytes -= old[1]
                settled.append(old)
        for start, size in settled:
            if self._sync(start, size, _WAIT):
                os.posix_fadvise(self._fd, start, size, os.POSIX_FADV_DONTNEED)

    def _sync(self, offset: int, length: int, flags: int) -> bool:
        """sync_file_range; False (and write-behind off) where the file system has none."""
        if LIBC.sync_file_range(self._fd, offset, length, flags) == 0:
            return True
        code = ctypes.get_errno()
        if code in _UNSUPPORTED:
            self.enabled = False
            return False
        raise VolumeError(
            f"{self._path}: writing back {length} bytes at offset {offset}: {os.strerror(code)}"
        )
