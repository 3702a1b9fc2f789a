"""Commands run in a guest through a real qemu-ga (guest-exec), jailed on a loop image: their
exit code and output, a program that fails or is missing, one that outlives its timeout."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from guest_agent import GuestAgent, jailed_agent

from diskferry.qemu.guestexec import guest_exec
from diskferry.qemu.qmp import QmpError


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[GuestAgent]:
    with jailed_agent(tmp_path) as started:
        yield started


def test_a_command_runs_in_the_guest_and_its_exit_code_is_read(agent: GuestAgent) -> None:
    ran = guest_exec(agent.socket, ["/usr/bin/touch", "/hooked"], timeout=10)
    assert (ran.exit_code, ran.timed_out) == (0, False)
    assert (agent.root / "hooked").exists()
    failed = guest_exec(agent.socket, ["/usr/bin/false"], timeout=10)
    assert failed.exit_code == 1 and not failed.ok


def test_what_a_command_prints_is_read(agent: GuestAgent) -> None:
    ran = guest_exec(agent.socket, ["/usr/bin/touch", "--no-such-option"], timeout=10)
    assert ran.exit_code != 0
    assert "no-such-option" in ran.err


def test_a_command_still_running_at_its_timeout_has_failed(agent: GuestAgent) -> None:
    ran = guest_exec(agent.socket, ["/usr/bin/sleep", "30"], timeout=0.5)
    assert ran.timed_out and ran.exit_code is None and not ran.ok


def test_a_missing_program_is_refused_by_the_agent(agent: GuestAgent) -> None:
    with pytest.raises(QmpError, match="guest-exec"):
        guest_exec(agent.socket, ["/usr/bin/no-such-program"], timeout=10)
