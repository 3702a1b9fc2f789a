"""The C library, for the few calls Python's os module lacks.

Loaded from the process's own symbols: `ctypes.util.find_library` would run `ldconfig -p`,
about 12 ms of every command's start-up for each module that asked.
"""

from __future__ import annotations

import ctypes

LIBC = ctypes.CDLL(None, use_errno=True)
