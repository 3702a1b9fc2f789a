"""What a running VM's guest agent says of its guest, asked by the embedded host over the
agent's socket: whether it answers (Deckhouse's AgentReady), the guest OS
(`status.guestOSInfo`, in KubeVirt's names) and each interface's addresses (`status.ipAddress`,
`status.networks[].ipAddress`). Each question waits at most ASK_SECONDS, so that a guest
without an agent never holds the controller for long."""

from __future__ import annotations

from typing import Any

from diskferry.control.host.machines import GuestFacts
from diskferry.qemu.qmp import Qmp, QmpError

ASK_SECONDS = 1.0
OS_INFO_NAMES = {
    "id": "id",
    "name": "name",
    "pretty-name": "prettyName",
    "version": "version",
    "version-id": "versionId",
    "machine": "machine",
    "kernel-release": "kernelRelease",
    "kernel-version": "kernelVersion",
}
"""guest-get-osinfo's fields, and KubeVirt's names of them in VirtualMachineInstanceGuestOSInfo."""


def os_info(raw: dict[str, Any]) -> dict[str, str]:
    """guest-get-osinfo's answer in KubeVirt's names (fields the agent left out, left out)."""
    return {ours: str(raw[theirs]) for theirs, ours in OS_INFO_NAMES.items() if raw.get(theirs)}


def addresses(interfaces: list[dict[str, Any]]) -> dict[str, str]:
    """Each interface's MAC (lower case) and its first IPv4 address, loopback left out."""
    found = {}
    for interface in interfaces:
        mac = str(interface.get("hardware-address") or "").lower()
        ipv4 = [
            str(a.get("ip-address"))
            for a in interface.get("ip-addresses") or []
            if a.get("ip-address-type") == "ipv4"
        ]
        ipv4 = [ip for ip in ipv4 if not ip.startswith("127.")]
        if mac and ipv4 and mac != "00:00:00:00:00:00":
            found[mac] = str(ipv4[0])
    return found


def ask(socket_path: str | None) -> GuestFacts:
    """Ask the agent at `socket_path` (the VM's own) what it knows; not answered when there is
    no agent channel or no agent behind it."""
    if not socket_path:
        return GuestFacts(False)
    try:
        with Qmp(socket_path, timeout=ASK_SECONDS, guest_agent=True) as agent:
            agent.command("guest-ping")
            info = _asked(agent, "guest-get-osinfo", {})
            interfaces = _asked(agent, "guest-network-get-interfaces", [])
    except QmpError:
        return GuestFacts(False)
    return GuestFacts(True, os_info(info), addresses(interfaces))


def _asked(agent: Qmp, command: str, otherwise: Any) -> Any:
    """The agent's answer to `command`, `otherwise` when it refuses it (an old or a restricted
    agent)."""
    try:
        return agent.command(command)
    except QmpError as e:
        if e.error_class is None:  # no answer at all, not a refusal
            raise
        return otherwise
