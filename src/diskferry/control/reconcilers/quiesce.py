"""Whether a VM's guest agent answers, so that a backup can freeze its filesystems."""

from __future__ import annotations

from diskferry.qemu.qmp import Qmp, QmpError

PING_SECONDS = 3.0


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
