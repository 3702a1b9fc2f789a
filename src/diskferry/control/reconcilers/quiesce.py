"""Whether a VM's guest agent answers, so that a backup or a snapshot can freeze its
filesystems, and the freeze itself around an instant copy."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from diskferry.qemu.freeze import frozen
from diskferry.qemu.qmp import Qmp, QmpError

PING_SECONDS = 3.0
FREEZE_SECONDS = 60.0


def agent_silence(socket_path: str | None) -> str | None:
    """Why the guest agent at `socket_path` cannot freeze the guest, None when it answers."""
    if not socket_path:
        return "the VM has no guest agent"
    try:
        with Qmp(socket_path, timeout=PING_SECONDS, guest_agent=True) as agent:
            agent.command("guest-ping")
    except QmpError as e:
        return f"the guest agent does not answer: {e.message}"
    return None


@contextlib.contextmanager
def guests_frozen(sockets: Sequence[str]) -> Iterator[None]:
    """The filesystems of the guests whose agents are at `sockets` frozen while the block runs."""
    with contextlib.ExitStack() as stack:
        for socket_path in sockets:
            stack.enter_context(frozen(socket_path, FREEZE_SECONDS))
        yield
