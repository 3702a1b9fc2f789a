"""What of a file the page cache holds, asked with mincore."""

from __future__ import annotations

import ctypes
import mmap
import os

PAGE = 4096
_LIBC = ctypes.CDLL(None, use_errno=True)


def cached_pages(path: str | os.PathLike[str]) -> int:
    """How many pages of the file at `path` are in the page cache."""
    size = os.path.getsize(path)
    vec = (ctypes.c_ubyte * ((size + PAGE - 1) // PAGE))()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        start = ctypes.c_char.from_buffer(m)
        got = _LIBC.mincore(ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), vec)
        del start
    assert got == 0, os.strerror(ctypes.get_errno())
    return sum(v & 1 for v in vec)
