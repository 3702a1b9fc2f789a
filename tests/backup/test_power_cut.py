"""Power cut at random moments of a backup and of a prune: what survives checks and restores.

The repository lives on powercut_fs (see its docstring for the model of what a cut keeps),
and every reboot of the test's machine is a power cut. Each round counts the changing calls
of an undisturbed run, goes back to the state before it, and runs it again with the power
cut after a random number of calls; the filesystem is then mounted again from what
survived. A command that finished must have left all it wrote durable.
DISKFERRY_POWERCUT_ROUNDS and DISKFERRY_POWERCUT_SEED set the rounds (2) and the seed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backup_support import PASSWORD, MiB, make_disk, same

FS = Path(__file__).with_name("powercut_fs.py")
ROUNDS = int(os.environ.get("DISKFERRY_POWERCUT_ROUNDS", "2"))
SEED = int(os.environ.get("DISKFERRY_POWERCUT_SEED", "5"))


class Mount:
    """powercut_fs mounted at `mountpoint` by a child process, from a saved tree or empty."""

    def __init__(self, mountpoint: Path, log: Path, state: Path | None = None) -> None:
        self.mountpoint = mountpoint
        self.proc = subprocess.Popen(
            [sys.executable, str(FS), str(mountpoint), *([str(state)] if state else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("a"),
            text=True,
        )
        deadline = time.monotonic() + 30
        while not os.path.ismount(mountpoint):
            assert self.proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "powercut_fs did not mount"
            time.sleep(0.05)

    def ask(self, command: str) -> str:
        """Send one command; its reply."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def unmount(self) -> None:
        """Unmount and wait for the filesystem process to end."""
        if self.proc.poll() is None:
            subprocess.run(["umount", str(self.mountpoint)], check=False)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                subprocess.run(["umount", "-l", str(self.mountpoint)], check=False)
                self.proc.kill()
                self.proc.wait()


class Machine:
    """A machine whose repository disk is powercut_fs: run commands, cut its power, reboot."""

    def __init__(self, root: Path, cli) -> None:
        self.root = root
        self.cli = cli
        self.mountpoint = root / "mnt"
        self.mountpoint.mkdir()
        self.log = root / "powercut_fs.log"
        self.mount = Mount(self.mountpoint, self.log)
        self.repo = str(self.mountpoint / "repo")

    def boot(self, state: Path) -> None:
        """Stop the filesystem, and mount it again from `state`."""
        self.mount.unmount()
        self.mount = Mount(self.mountpoint, self.log, state)

    def save(self, name: str) -> Path:
        """Save what a power cut now would leave."""
        state = self.root / f"{name}.state"
        assert self.mount.ask(f"save {state}") == "ok"
        return state

    def calls_of(self, *args: str) -> int:
        """How many changing calls the command makes from here (the state is then restored)."""
        before = self.save("before")
        start = int(self.mount.ask("count"))
        done = self.cli(*args)
        assert done.code == 0, done.stderr
        calls = int(self.mount.ask("count")) - start
        self.boot(before)
        return calls

    def cut_during(self, calls: int, *args: str):
        """Run the command with the power cut after `calls` changing calls; then reboot."""
        assert self.mount.ask(f"cut-after {calls}") == "ok"
        result = self.cli(*args)
        self.power_cycle()
        return result

    def power_cycle(self) -> None:
        """Cut the power (unless it is off already), and boot from what survived."""
        if self.mount.ask("cut?") == "no":
            self.mount.ask("cut-after 0")
        self.boot(self.save("after-cut"))


@pytest.fixture
def machine(tmp_path, diskferry):
    diskferry.env.update(DISKFERRY_PASSWORD=PASSWORD, DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    made = Machine(tmp_path, diskferry)
    try:
        yield made
    finally:
        made.mount.unmount()


def checks(machine: Machine) -> None:
    done = machine.cli("repo", "check", "--repo", machine.repo, "--read-data", "--json")
    assert done.code == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ok"]


def snapshots(machine: Machine) -> list[str]:
    listed = machine.cli("snapshots", "--repo", machine.repo, "--json")
    assert listed.code == 0, listed.stderr
    return [s["id"] for s in json.loads(listed.stdout)]


@pytest.mark.long
def test_power_cut_during_backup_and_prune(machine, tmp_path):
    rnd = random.Random(SEED)
    volume = make_disk(tmp_path / "disk.raw", tracked=False)
    backup = ("backup", "--repo", machine.repo, "--vm", "vm", "--disk", f"d={volume}", "--json")
    references: dict[str, Path] = {}

    def back_up() -> str:
        done = machine.cli(*backup)
        assert done.code == 0, done.stderr
        snapshot = json.loads(done.stdout)["disks"][0]["snapshot"]
        references[snapshot] = tmp_path / f"ref-{snapshot}.raw"
        shutil.copyfile(volume, references[snapshot])
        return snapshot

    def restores(snapshot: str) -> bool:
        out = tmp_path / "restored.raw"
        done = machine.cli("restore", snapshot, out, "--repo", machine.repo, "--force")
        assert done.code == 0, done.stderr
        return same(out, references[snapshot])

    made = machine.cli("repo", "init", "--repo", machine.repo, "--chunk-size", "256K")
    assert made.code == 0, made.stderr
    machine.power_cycle()
    back_up()
    failed = 0
    for _ in range(ROUNDS):
        with open(volume, "r+b") as f:  # most of the data anew, so that prune has work
            f.seek(MiB + rnd.randrange(0, MiB))
            f.write(os.urandom(rnd.randrange(3 * MiB // 2, 5 * MiB // 2)))
            f.seek(rnd.randrange(5 * MiB, 30 * MiB))
            f.write(os.urandom(rnd.randrange(64 << 10, MiB)))
        before = set(snapshots(machine))
        cut = machine.cut_during(rnd.randrange(1, machine.calls_of(*backup)), *backup)
        failed += cut.code != 0
        checks(machine)
        survived = set(snapshots(machine)) - before
        if cut.code == 0:  # the backup finished before the cut: it must have survived
            assert json.loads(cut.stdout)["disks"][0]["snapshot"] in survived
        for snapshot in survived:  # saved before the cut, it holds the disk as it is
            references[snapshot] = tmp_path / f"ref-{snapshot}.raw"
            shutil.copyfile(volume, references[snapshot])
        assert before <= set(snapshots(machine))
        newest = back_up()
        machine.power_cycle()
        assert all(restores(s) for s in [newest, *survived])

        forgot = machine.cli("forget", "--repo", machine.repo, "--keep-last", "1")
        assert forgot.code == 0, forgot.stderr
        kept = set(snapshots(machine))
        prune = ("prune", "--repo", machine.repo)
        cut = machine.cut_during(rnd.randrange(1, machine.calls_of(*prune)), *prune)
        failed += cut.code != 0
        checks(machine)
        assert set(snapshots(machine)) == kept
        newest = back_up()
        machine.power_cycle()
        assert all(restores(s) for s in [*kept, newest])
    assert failed, "no cut fell inside a run"
