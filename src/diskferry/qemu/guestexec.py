"""A command run in a guest through its QEMU guest agent (guest-exec), waited for up to a
timeout: its exit code and what it printed, or that it was still running."""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from dataclasses import dataclass

from diskferry.qemu.qmp import Qmp

POLL_SECONDS = 0.1
CONNECT_SECONDS = 10.0
KEPT_OUTPUT = 4096
"""The bytes of a command's output kept (its last ones)."""


@dataclass(frozen=True)
class GuestRun:
    """How a command ended in the guest: its exit code (None while it ran on past its
    timeout), the end of its stdout and stderr."""

    exit_code: int | None
    out: str = ""
    err: str = ""
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Whether it exited 0."""
        return self.exit_code == 0


def _text(encoded: str | None) -> str:
    data = base64.b64decode(encoded or "")[-KEPT_OUTPUT:]
    return data.decode(errors="replace")


def guest_exec(socket_path: str, argv: Sequence[str], timeout: float) -> GuestRun:
    """Run `argv` (a program's path in the guest and its arguments) through the agent at
    `socket_path` and wait for it at most `timeout` seconds; QmpError when the agent cannot
    be reached or refuses the command (a program it cannot start)."""
    with Qmp(socket_path, timeout=CONNECT_SECONDS, guest_agent=True) as agent:
        started = agent.command("guest-exec", path=argv[0], arg=list(argv[1:]), capture_output=True)
        deadline = time.monotonic() + timeout
        while True:
            status = agent.command("guest-exec-status", pid=started["pid"])
            if status.get("exited"):
                code = status.get("exitcode")
                if code is None:  # killed: as a shell says it, 128 and the signal
                    code = 128 + int(status.get("signal", 0))
                return GuestRun(
                    code,
                    _text(status.get("out-data")),
                    _text(status.get("err-data")),
                )
            if time.monotonic() >= deadline:
                return GuestRun(None, timed_out=True)
            time.sleep(POLL_SECONDS)
