"""Children that end with this process, whichever of its threads started them.

Linux's parent-death signal (PR_SET_PDEATHSIG) is sent when the *thread* that forked a
child ends, not when its process does: a child forked by a worker thread would get it as
soon as that thread returned. So every tethered child is forked by one spawner thread
that lives as long as the process, and is started through util-linux's
`setpriv --pdeathsig TERM`, which sets the signal and execs the program. (A
`preexec_fn` could set it too, but runs Python in the child between fork and exec, which
may deadlock on a lock another thread held at the fork.) However the process ends,
SIGKILL included, its tethered children get SIGTERM.

Each child also runs in a process group of its own, so that a terminal's Ctrl-C reaches
diskferry, which then stops the child in order, and not the child directly.

A process killed before setpriv has armed the signal sends none, so between setpriv and
the program a shell checks that its parent is still the process that started it, and
runs nothing when it is not: once the signal is armed, the parent's death either sends it
or has already given the child another parent. `start` returns once setpriv has armed
the signal. A child that must not outlive the process is also recorded (pid and start
time, see `procstat`) for the next start to end.
"""

from __future__ import annotations

import errno
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_SETPRIV = ["setpriv", "--pdeathsig", "TERM", "--"]
# run by setpriv as `sh -c GUARD sh PARENT PROGRAM ARGS...`
_PARENT_GUARD = '[ "$PPID" = "$1" ] || exit 125; shift; exec "$@"'


@dataclass
class _Request:
    args: list[str]
    popen: dict[str, Any]
    done: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[Any] | None = None
    error: BaseException | None = None


class _Spawner:
    """The one thread that forks every tethered child; it runs until the process ends."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="diskferry-spawner", daemon=True).start()

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            try:
                request.process = subprocess.Popen(request.args, **request.popen)
            except BaseException as e:  # handed to the thread that asked
                request.error = e
            request.done.set()

    def spawn(self, args: list[str], popen: dict[str, Any]) -> subprocess.Popen[Any]:
        request = _Request(args, popen)
        self._requests.put(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.process is not None
        return request.process


_lock = threading.Lock()
_spawner: _Spawner | None = None


def _forget_spawner() -> None:
    """A forked child has none of its parent's threads: it starts a spawner of its own."""
    global _lock, _spawner
    _lock, _spawner = threading.Lock(), None


os.register_at_fork(after_in_child=_forget_spawner)


def start(args: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(args, **popen)` for a child that gets SIGTERM when this process ends.

    The Popen's pid is the program's own (setpriv execs it). A program not found raises
    FileNotFoundError, as Popen does.
    """
    global _spawner
    program = args[0]
    if shutil.which(program) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    with _lock:
        if _spawner is None:
            _spawner = _Spawner()
        spawner = _spawner
    guarded = ["/bin/sh", "-c", _PARENT_GUARD, "sh", str(os.getpid()), *args]
    process = spawner.spawn([*_SETPRIV, *guarded], {**popen, "process_group": 0})
    _wait_past_setpriv(process)
    return process


def _wait_past_setpriv(process: subprocess.Popen[Any]) -> None:
    """Wait until the child has run setpriv to its end: the signal is armed from then on."""
    setpriv = os.path.realpath(shutil.which(_SETPRIV[0]) or _SETPRIV[0])
    while process.poll() is None:
        try:
            if os.readlink(f"/proc/{process.pid}/exe") != setpriv:
                return
        except OSError:  # it has just ended
            return
        time.sleep(0.001)
