"""Why a VM's guest agent cannot be reached, said as a user of the VM's manifest can act on it:
the field that adds an agent channel, or what to check in the guest; never the socket's path
(the host's own), however the host's machines found the agent silent."""

from __future__ import annotations

import socket
from pathlib import Path

from diskferry.control.host.embedded.machines import QemuMachines
from diskferry.control.reconcilers.vms.quiesce import agent_silence
from diskferry.control.resources.virtualmachine import VirtualMachine


def _vm(guest_agent: bool) -> VirtualMachine:
    return VirtualMachine.model_validate(
        {
            "metadata": {"name": "vm", "namespace": "default", "uid": "u-1"},
            "spec": {
                "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd"}],
                "enableGuestAgent": guest_agent,
            },
        }
    )


def test_no_agent_channel_names_the_field_that_adds_it(tmp_path: Path) -> None:
    said = agent_silence(QemuMachines(tmp_path), _vm(False))
    assert said is not None and "spec.enableGuestAgent" in said


def test_an_agent_that_does_not_answer_is_said_without_its_socket(tmp_path: Path) -> None:
    machines = QemuMachines(tmp_path)
    vm = _vm(True)
    path = Path(machines.sockets(vm).agent or "")
    path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as listening:  # a channel with no agent behind it
        listening.bind(str(path))
        listening.listen()
        said = agent_silence(machines, vm)
    assert said is not None and "guest agent" in said and "qemu-guest-agent" in said
    assert str(tmp_path) not in said
    gone = agent_silence(QemuMachines(tmp_path / "other"), vm)
    assert gone is not None and str(tmp_path) not in gone
