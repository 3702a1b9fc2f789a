"""A backup's hooks run in the guest through a real qemu-ga (jailed on a loop image): pre hooks
before the point is taken, post hooks after, each outcome in the result; one that fails with
onError Continue is reported, one with Fail stops the backup before any snapshot is named."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_support import engine_fixture, make_disk  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent.parent / "qemu"))

from guest_agent import GuestAgent, jailed_agent

from diskferry.backup.hooks import HookFailedError
from diskferry.backup.job import FailedHook
from diskferry.backup.repository import Repository


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[GuestAgent]:
    (tmp_path / "guest").mkdir()
    with jailed_agent(tmp_path / "guest") as started:
        yield started


def hook(name: str, phase: str, *command: str, on_error: str = "Fail") -> dict:
    return {"name": name, "phase": phase, "command": list(command), "onError": on_error}


def test_pre_and_post_hooks_run_in_the_guest_around_the_point(engine, agent, tmp_path):
    disk = make_disk(tmp_path / "disk.raw")
    hooks = [
        hook("flush", "pre", "/usr/bin/touch", "/pre-ran"),
        hook("resume", "post", "/usr/bin/touch", "/post-ran"),
        hook("noisy", "post", "/usr/bin/false", on_error="Continue"),
    ]
    result = engine.backup(disks={"d": disk}, hooks=hooks, hookAgent=agent.socket)
    assert [(h.name, h.phase, h.exit_code, h.failed) for h in result.hooks] == [
        ("flush", "pre", 0, False),
        ("resume", "post", 0, False),
        ("noisy", "post", 1, True),
    ]
    assert (agent.root / "pre-ran").exists() and (agent.root / "post-ran").exists()
    assert len(result.disks) == 1


def test_a_failing_pre_hook_stops_the_backup(engine, agent, tmp_path):
    disk = make_disk(tmp_path / "disk.raw")
    hooks = [
        hook("check", "pre", "/usr/bin/false"),
        hook("resume", "post", "/usr/bin/touch", "/post-ran"),
    ]
    with pytest.raises(HookFailedError) as info:
        engine.backup(disks={"d": disk}, hooks=hooks, hookAgent=agent.socket)
    stopped = FailedHook.named_in(info.value.reason, info.value.message)
    assert stopped == FailedHook(name="check", phase="pre")
    assert info.value.message == "hook check (pre) failed: exited 1"
    assert not (agent.root / "post-ran").exists()
    with Repository.open(engine.url, "correct horse") as repo:
        assert repo.list_snapshots() == []


def test_without_an_agent_no_hook_runs(engine, tmp_path):
    disk = make_disk(tmp_path / "disk.raw")
    result = engine.backup(disks={"d": disk}, hooks=[hook("check", "pre", "/usr/bin/false")])
    assert result.hooks == [] and len(result.disks) == 1
