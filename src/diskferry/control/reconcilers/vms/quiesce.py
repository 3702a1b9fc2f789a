"""Whether a VM's guest agent answers, so that a backup, a snapshot or a hook can reach its
guest, said as the VM's user can act on it (the agent's socket, the host's own, is not named);
the machines tell whether it answered, at most every AGENT_SECONDS."""

from __future__ import annotations

from diskferry.control.host.machines import AGENT_SECONDS, Machines
from diskferry.control.resources.virtualmachine import VirtualMachine


def agent_silence(machines: Machines, vm: VirtualMachine) -> str | None:
    """Why the guest agent of `vm` cannot be reached (to freeze its guest, to run a command in
    it), None when it answers."""
    if machines.sockets(vm).agent is None:
        return "the VM has no guest agent channel (spec.enableGuestAgent is false)"
    if not machines.guest(vm).answered:
        return (
            f"the guest agent did not answer in the last {AGENT_SECONDS:g} s "
            "(is qemu-guest-agent installed and running in the guest?)"
        )
    return None
