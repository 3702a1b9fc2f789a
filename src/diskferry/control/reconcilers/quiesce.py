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
    """Why the guest agent at `socket_path` cannot freeze the guest, None when it answers; said
    as the VM's user can act on it (the socket, the daemon's own, is not named)."""
    if not socket_path:
        return "the VM has no guest agent channel (spec.enableGuestAgent is false)"
    try:
        with Qmp(socket_path, timeout=PING_SECONDS, guest_agent=True) as agent:
            agent.command("guest-ping")
    except QmpError:
        return (
            f"the guest agent did not answer within {PING_SECONDS:g} s "
            "(is qemu-guest-agent installed and running in the guest?)"
        )
    return None


@contextlib.contextmanager
def guests_frozen(sockets: Sequence[str]) -> Iterator[None]:
    """The filesystems of the guests whose agents are at `sockets` frozen while the block runs."""
    with contextlib.ExitStack() as stack:
        for socket_path in sockets:
            stack.enter_context(frozen(socket_path, FREEZE_SECONDS))
        yield
