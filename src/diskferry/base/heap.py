"""The C heap kept to a few arenas, so that a process's threads do not each hold freed memory.

glibc gives threads arenas of their own, up to eight per core; each keeps what its thread
freed, so a process whose threads pass 1 MiB buffers around (a backup's readers and
sealers, a server's streams) grows its resident memory by tens of MiB per arena beyond
what it holds. Two arenas cost no measurable time there and keep that growth away.
"""

from __future__ import annotations

import ctypes

from diskferry.base.libc import LIBC

ARENAS = 2
_M_ARENA_MAX = -8


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Let the C heap use at most `arenas` arenas from now on; False where it cannot (a C
    library other than glibc). Call it before the process starts threads."""
    mallopt = getattr(LIBC, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(_M_ARENA_MAX, arenas))
