"""What a guest agent says of its guest, read as a VM's status gives it: the OS in KubeVirt's
names, each interface's address; no agent, or one that never answers, is said so at once."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from diskferry.control.host.embedded.guest import ASK_SECONDS, ask
from diskferry.control.host.machines import GuestFacts

OS_INFO = {
    "id": "ubuntu",
    "name": "Ubuntu",
    "pretty-name": "Ubuntu 24.04 LTS",
    "version": "24.04 LTS (Noble Numbat)",
    "version-id": "24.04",
    "machine": "x86_64",
    "kernel-release": "6.8.0-31-generic",
    "kernel-version": "#31-Ubuntu SMP",
}
INTERFACES = [
    {
        "name": "lo",
        "hardware-address": "00:00:00:00:00:00",
        "ip-addresses": [{"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8}],
    },
    {
        "name": "enp1s0",
        "hardware-address": "02:AB:CD:00:00:01",
        "ip-addresses": [
            {"ip-address-type": "ipv6", "ip-address": "fe80::1", "prefix": 64},
            {"ip-address-type": "ipv4", "ip-address": "10.0.2.15", "prefix": 24},
        ],
    },
]


class FakeAgent:
    """A guest agent on a Unix socket answering `answers` by command name."""

    def __init__(self, path: Path, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(path))
        self.server.listen()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                self._talk(conn)

    def _talk(self, conn: socket.socket) -> None:
        """Answer each JSON command as it comes (QMP sends them without newlines)."""
        pending, decoder = "", json.JSONDecoder()
        while data := conn.recv(65536):
            pending += data.decode()
            while pending.strip():
                try:
                    asked, end = decoder.raw_decode(pending.lstrip())
                except ValueError:
                    break
                pending = pending.lstrip()[end:]
                name = asked["execute"]
                if name in self.answers:
                    reply = {"return": self.answers[name], "id": asked.get("id")}
                else:
                    error = {"class": "CommandNotFound", "desc": f"{name} not found"}
                    reply = {"error": error, "id": asked.get("id")}
                conn.sendall(json.dumps(reply).encode() + b"\n")


@pytest.fixture
def agent_path(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "agent.sock"


def test_an_agent_tells_the_guest_os_and_addresses(agent_path: Path) -> None:
    answers = {
        "guest-ping": {},
        "guest-get-osinfo": OS_INFO,
        "guest-network-get-interfaces": INTERFACES,
    }
    FakeAgent(agent_path, answers)
    facts = ask(str(agent_path))
    assert facts.answered
    assert facts.os_info == {
        "id": "ubuntu",
        "name": "Ubuntu",
        "prettyName": "Ubuntu 24.04 LTS",
        "version": "24.04 LTS (Noble Numbat)",
        "versionId": "24.04",
        "machine": "x86_64",
        "kernelRelease": "6.8.0-31-generic",
        "kernelVersion": "#31-Ubuntu SMP",
    }
    assert facts.addresses == {"02:ab:cd:00:00:01": "10.0.2.15"}


def test_an_agent_that_knows_less_still_answers(agent_path: Path) -> None:
    FakeAgent(agent_path, {"guest-ping": {}})
    assert ask(str(agent_path)) == GuestFacts(True)


def test_no_agent_channel_or_no_agent_behind_it(tmp_path: Path) -> None:
    assert ask(None) == GuestFacts(False)
    assert ask(str(tmp_path / "none.sock")) == GuestFacts(False)
    silent = socket.socket(socket.AF_UNIX)  # a channel with no agent: never answers
    silent.bind(str(tmp_path / "silent.sock"))
    silent.listen()
    try:
        assert ask(str(tmp_path / "silent.sock")) == GuestFacts(False)
    finally:
        silent.close()
    assert ASK_SECONDS <= 1
