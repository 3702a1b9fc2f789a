"""A guest's filesystems frozen through its QEMU guest agent for a moment, thawed after."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from diskferry.qemu.qmp import Qmp


@contextlib.contextmanager
def frozen(qga_socket: str | None, timeout: float) -> Iterator[None]:
    """Freeze the guest's filesystems through the agent at `qga_socket` (nothing without one)
    while the block runs, and thaw them however it ends."""
    if qga_socket is None:
        yield
        return
    with Qmp(qga_socket, timeout=timeout, guest_agent=True) as agent:
        agent.command("guest-fsfreeze-freeze")
        try:
            yield
        finally:
            agent.command("guest-fsfreeze-thaw")
