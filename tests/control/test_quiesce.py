"""Why a VM's guest agent cannot freeze its guest, said as a user of the VM's manifest can act on
it: no socket path of the data directory, no command."""

from __future__ import annotations

import socket
from pathlib import Path

from diskferry.control.reconcilers.quiesce import agent_silence


def test_no_agent_channel_names_the_field_that_adds_it() -> None:
    said = agent_silence(None)
    assert said is not None and "spec.enableGuestAgent" in said


def test_an_agent_that_does_not_answer_is_said_without_its_socket(tmp_path: Path) -> None:
    path = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX) as listening:  # a channel with no agent behind it
        listening.bind(str(path))
        listening.listen()
        said = agent_silence(str(path))
    assert said is not None and "guest agent" in said and "qemu-guest-agent" in said
    assert str(tmp_path) not in said
    gone = agent_silence(str(tmp_path / "none.sock"))
    assert gone is not None and str(tmp_path) not in gone
