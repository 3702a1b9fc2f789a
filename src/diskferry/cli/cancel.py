"""SIGINT and SIGTERM in the CLI: the cancel event of the engine that runs, a stop elsewhere.

`main` makes both signals raise Interrupted wherever the command is; while an engine runs
(`cancellable`) they set its cancel event instead, so that it stops where it can and cleans
up what it made, and only then does the command end with Interrupted. The CLI prints
`diskferry: cancelled` and exits 128 + the signal's number: 130 for SIGINT, 143 for SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from diskferry.cli.common import note

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The command was stopped by a signal (a BaseException, as KeyboardInterrupt is, so that
    no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a command the signal ended."""
        return 128 + self.signum


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def stop_on_signals() -> None:
    """Make SIGINT and SIGTERM raise Interrupted wherever the command is."""
    for sig in SIGNALS:
        signal.signal(sig, _interrupt)


@contextlib.contextmanager
def signals_set(event: threading.Event) -> Iterator[list[int]]:
    """While the block runs, SIGINT and SIGTERM set `event`; the signals that came are listed."""
    seen: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        event.set()

    previous = {sig: signal.signal(sig, handler) for sig in SIGNALS}
    try:
        yield seen
    finally:
        for sig, handler_before in previous.items():
            signal.signal(sig, handler_before)


def target_left(target: str) -> str:
    """What a cancelled write of `target` leaves, said before it starts: a file as it was (or
    not made), a block device partly written."""
    from diskferry.disk import is_block_device

    if is_block_device(target):
        return f"the block device {target} is partly written"
    state = "as it was" if os.path.exists(target) else "not made"
    return f"removed what it wrote: {target} is {state}"


@contextlib.contextmanager
def cancellable(left: str | None = None) -> Iterator[threading.Event]:
    """The cancel event of an engine run in the block; an engine stopped by a signal raises
    Interrupted in place of its own error (CancelledError, mostly), after noting what it
    `left`. An engine that finished all the same has done its job: the command goes on."""
    cancel = threading.Event()
    with signals_set(cancel) as seen:
        try:
            yield cancel
        except Exception:
            if seen:
                if left is not None:
                    note(left)
                raise Interrupted(seen[0]) from None
            raise
