"""A process as /proc/PID/stat tells it: its state and start time, to know it across pid reuse.

A pid alone may name another process once the first has ended; the pair (pid, start time
in clock ticks since boot) names one process for as long as the host runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# fields after the parenthesised command name, counted from the state (field 3 of proc(5))
_STATE = 0
_START_TIME = 19


@dataclass(frozen=True)
class ProcessStat:
    """What /proc/PID/stat says of one process."""

    pid: int
    state: str
    start_time: int

    @property
    def zombie(self) -> bool:
        """Whether the process has ended and only waits for its parent to reap it."""
        return self.state in ("Z", "X")


def read(pid: int) -> ProcessStat | None:
    """The state and start time of process `pid`, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may hold spaces and parentheses: it ends at the last ')'
    fields = text.rpartition(")")[2].split()
    return ProcessStat(pid, fields[_STATE], int(fields[_START_TIME]))


def boot_id() -> str:
    """This boot's id: a (pid, start time) pair means one process only within one boot."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot); None when it is gone or a zombie."""
    stat = read(pid)
    return None if stat is None or stat.zombie else stat.start_time


def is_same(pid: int, started: int) -> bool:
    """Whether `pid` is still the live process that started at `started` clock ticks."""
    return start_time(pid) == started


def has_ended(pid: int, started: int) -> bool:
    """Whether the process that started at `started` has ended with all its threads.

    A killed process's first thread turns zombie while its other threads may still be
    exiting with the open files they share: until the last has, its locks are held.
    """
    stat = read(pid)
    if stat is None or stat.start_time != started:
        return True
    if not stat.zombie:
        return False
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True
