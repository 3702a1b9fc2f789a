"""The backup worker's hooks job: commands run in order in a VM's guest through its agent,
each one's outcome in the result, none after one that failed with onError Fail."""

from __future__ import annotations

import sys
from pathlib import Path

from worker_support import job_file, run

sys.path.insert(0, str(Path(__file__).parent.parent / "qemu"))

from guest_agent import jailed_agent


def _hook(name: str, *command: str, on_error: str = "Continue") -> dict:
    return {"name": name, "phase": "post", "command": list(command), "onError": on_error}


def test_hooks_run_in_order_until_one_fails_that_must_not(tmp_path: Path) -> None:
    with jailed_agent(tmp_path) as agent:
        hooks = [
            _hook("first", "/usr/bin/touch", "/first-ran"),
            _hook("may-fail", "/usr/bin/false"),
            _hook("must-pass", "/usr/bin/false", on_error="Fail"),
            _hook("never", "/usr/bin/touch", "/never-ran"),
        ]
        job = {"kind": "hooks", "jobId": "rh-1", "agent": agent.socket, "hooks": hooks}
        finished = run("backup", job_file(tmp_path, job))
        assert (agent.root / "first-ran").exists()
        assert not (agent.root / "never-ran").exists()
    assert finished.code == 0, finished.stderr
    outcomes = finished.result["hooks"]
    assert [(o["name"], o["failed"]) for o in outcomes] == [
        ("first", False),
        ("may-fail", True),
        ("must-pass", True),
    ]
    assert outcomes[1]["exitCode"] == 1


def test_an_agent_that_cannot_be_reached_fails_each_hook_it_was_to_run(tmp_path: Path) -> None:
    hooks = [_hook("one", "/usr/bin/true", on_error="Fail"), _hook("two", "/usr/bin/true")]
    job = {"kind": "hooks", "agent": str(tmp_path / "none.sock"), "hooks": hooks}
    finished = run("backup", job_file(tmp_path, job))
    assert finished.code == 0, finished.stderr
    assert [(o["name"], o["failed"]) for o in finished.result["hooks"]] == [("one", True)]
