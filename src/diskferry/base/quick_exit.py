"""A process's exit without the interpreter's last runs of the cyclic garbage collector.

At exit the interpreter clears its modules and then runs the cyclic collector over every
object still alive: after a command's imports (pydantic's schemas among them) that is tens
of ms to well over 100 ms of every command, spent freeing memory the kernel takes back anyway.
Freezing the collector as the last thing before finalization leaves those objects to the
kernel; what reference counting frees (a file closed and flushed, a socket shut) is freed as
before.
"""

from __future__ import annotations

import atexit
import gc


def freeze_at_exit() -> None:
    """Freeze the cyclic collector once every other exit handler has run; call it first thing,
    since exit handlers run last registered first."""
    atexit.register(gc.freeze)
