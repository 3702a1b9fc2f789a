"""Backup, prune, restore and import killed with SIGKILL at seeded random moments.

Each command runs as the real CLI in its own process group, and the whole group is killed.
After each kill the repository passes `repo check --read-data`, the next run succeeds and
is correct, restores are byte-exact, and nothing is left behind: no temporary file, no
fleecing image, no storage daemon. DISKFERRY_STRESS sets the number of moments per loop
(8 by default; `make stress` runs 50), DISKFERRY_KILL_SEED the seed.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "backup"))

from backup_support import write_random

from diskferry.backup.config import KdfParams
from diskferry.backup.job import RestoreJob
from diskferry.backup.repository import Repository
from diskferry.backup.restore import run_restore
from diskferry.disk.progress import Progress
from diskferry.qemu import cbt

pytestmark = pytest.mark.stress
MOMENTS = int(os.environ.get("DISKFERRY_STRESS", "8"))
SEED = int(os.environ.get("DISKFERRY_KILL_SEED", "2026"))
PASSWORD = "kill loop"
MiB = 1 << 20
KiB = 1 << 10
DISK_SIZE = 32 * MiB
# what a run may leave only while it runs: primes and scratches, partial downloads, storage
# daemon folders, fleecing images
_TEMPORARY = (".prime-", ".scratch-", ".part", "qs-", "fleece", "diskferry-scratch")


@dataclass
class Loop:
    """A directory repository, the CLI's environment, and a reference copy of each snapshot."""

    root: Path
    repo: str
    env: dict[str, str]
    rnd: random.Random
    references: dict[str, Path] = field(default_factory=dict)
    kills: int = 0
    startup: float = 0.0

    def argv(self, *args: str | os.PathLike[str]) -> list[str]:
        """The command line of `diskferry ARGS`."""
        return [str(Path(sys.executable).with_name("diskferry")), *map(str, args)]

    def run(self, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
        """Run `diskferry ARGS` to its end; it must succeed."""
        proc = subprocess.run(
            self.argv(*args), env=self.env, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return proc

    def timed(self, *args: str | os.PathLike[str]) -> float:
        """How long an undisturbed `diskferry ARGS` takes."""
        started = time.monotonic()
        self.run(*args)
        return time.monotonic() - started

    def kill(self, span: float, *args: str | os.PathLike[str]) -> int:
        """Start `diskferry ARGS` in a group of its own and kill the group at a random moment
        of the `span` seconds it takes once started; its exit status (negative when killed)."""
        proc = subprocess.Popen(
            self.argv(*args),
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(self.rnd.uniform(self.startup, max(span, self.startup)))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait(60)
        self.kills += code == -signal.SIGKILL
        self.wait_for_no_process()
        return code

    def wait_for_no_process(self) -> None:
        """Wait until no process names a file of this test (a storage daemon, qemu-img)."""
        deadline = time.monotonic() + 20
        while left := _processes_naming(str(self.root)):
            assert time.monotonic() < deadline, f"left running: {left}"
            time.sleep(0.05)

    def check(self) -> None:
        """`diskferry repo check --read-data` passes."""
        self.run("repo", "check", "--read-data", "--repo", self.repo, "--no-progress")

    def backup(self, disk: str, *extra: str) -> str:
        """Back up `disk` of VM vm to the end; keep a reference copy; the snapshot id."""
        proc = self.run(*self.backup_args(disk), *extra)
        (done,) = json.loads(proc.stdout)["disks"]
        self.keep(done["snapshot"], disk)
        return done["snapshot"]

    def backup_args(self, disk: str) -> tuple[str, ...]:
        """The arguments of a backup of `disk`."""
        return ("backup", "--repo", self.repo, "--vm", "vm", "--disk", f"d={disk}", "--json")

    def keep(self, snapshot: str, disk: str) -> None:
        """Save a copy of `disk` as `snapshot` holds it."""
        copy = self.root / f"ref-{snapshot}.raw"
        shutil.copyfile(disk, copy)
        self.references[snapshot] = copy

    def snapshots(self) -> set[str]:
        """The ids of the repository's snapshots."""
        with Repository.open(self.repo, PASSWORD) as repo:
            return {s.id for s in repo.list_snapshots()}

    def restores_exactly(self, snapshots: set[str] | None = None) -> None:
        """Each snapshot (all that have a reference by default) restores equal to its copy."""
        out = self.root / "restored.raw"
        for snapshot in sorted(snapshots if snapshots is not None else self.references):
            job = RestoreJob(repo=self.repo, snapshot=snapshot, target=str(out), force=True)
            run_restore(job, Progress())
            assert _same(out, self.references[snapshot]), snapshot
            out.unlink()

    def assert_nothing_left(self, *directories: Path) -> None:
        """No temporary file of a run in the test's folders or TMPDIR, no process of its own."""
        for directory in (self.root, Path(self.env["TMPDIR"]), *directories):
            names = os.listdir(directory)
            assert not [n for n in names if any(t in n for t in _TEMPORARY)], names
        assert not _processes_naming(str(self.root))


def _processes_naming(text: str) -> list[str]:
    """The command lines of other processes that mention `text`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(cmdline)
    return found


def _same(a: Path, b: Path) -> bool:
    proc = subprocess.run(["qemu-img", "compare", "-q", str(a), str(b)], capture_output=True)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode == 0


def _disk(path: Path, *, tracked: bool = True) -> str:
    """A sparse 32 MiB raw volume with 4 MiB of data, with CBT when `tracked`."""
    with open(path, "wb") as f:
        f.truncate(DISK_SIZE)
        f.seek(MiB)
        f.write(os.urandom(3 * MiB))
        f.seek(20 * MiB)
        f.write(os.urandom(MiB))
    if tracked:
        cbt.enable(str(path))
    return str(path)


def _scribble(loop: Loop, disk: str, writes: int = 4) -> None:
    """Write a few random runs through the disk's CBT overlay."""
    for _ in range(writes):
        offset = loop.rnd.randrange(0, DISK_SIZE - 256 * KiB)
        write_random(cbt.overlay_path(disk), offset, loop.rnd.randrange(1, 256 * KiB))


@pytest.fixture
def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request) -> Loop:
    """A fresh repository with a fast key derivation, and the CLI's environment for it."""
    repo = str(tmp_path / "repo")
    Repository.init(repo, PASSWORD, kdf=KdfParams(n=1 << 10, r=8, p=1)).close()
    temp = tmp_path / "tmp"
    temp.mkdir()
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("DISKFERRY_PASSWORD", PASSWORD)
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", cache)
    env = {
        **os.environ,
        "TMPDIR": str(temp),
        "XDG_RUNTIME_DIR": str(temp),
        "DISKFERRY_PASSWORD": PASSWORD,
        "DISKFERRY_CACHE_DIR": cache,
    }
    seed = SEED + sum(map(ord, request.node.name))
    loop = Loop(tmp_path, repo, env, random.Random(seed))
    loop.startup = 0.8 * loop.timed("--help")  # before its work starts, a kill tests nothing
    return loop


def _loop(loop: Loop, one: Callable[[int], None]) -> None:
    for moment in range(MOMENTS):
        one(moment)
    assert loop.kills >= max(1, MOMENTS // 4), f"only {loop.kills} of {MOMENTS} runs were killed"


def test_backups_killed(loop: Loop) -> None:
    disk = _disk(loop.root / "disk.raw")
    loop.backup(disk)
    _scribble(loop, disk)
    started = time.monotonic()
    loop.backup(disk)
    span = time.monotonic() - started  # of an incremental, as the killed ones are

    def one(_: int) -> None:
        _scribble(loop, disk)
        before = loop.snapshots()
        loop.kill(span, *loop.backup_args(disk))
        for made in loop.snapshots() - before:  # saved before the kill: the disk as it is
            loop.keep(made, disk)
        loop.check()
        _scribble(loop, disk)
        loop.restores_exactly({loop.backup(disk)})
        loop.assert_nothing_left()

    _loop(loop, one)
    loop.restores_exactly()


def test_prunes_killed(loop: Loop) -> None:
    disk = _disk(loop.root / "disk.raw")
    kept = []
    for n in range(4):
        _scribble(loop, disk, writes=6)
        snapshot = loop.backup(disk, *(["--full"] if n == 2 else []))
        if n in (1, 2):
            loop.run("forget", "--repo", loop.repo, snapshot)
            del loop.references[snapshot]
        else:
            kept.append(snapshot)
    base = loop.root / "base"
    shutil.copytree(loop.repo, base)
    span = loop.timed("prune", "--repo", loop.repo)
    dead = {s: loop.references[s] for s in kept}

    def one(_: int) -> None:
        shutil.rmtree(loop.repo)
        shutil.copytree(base, loop.repo)
        loop.references = dict(dead)
        loop.kill(span, "prune", "--repo", loop.repo)
        loop.check()
        loop.restores_exactly()
        loop.run("prune", "--repo", loop.repo)
        _scribble(loop, disk)
        loop.backup(disk)
        loop.restores_exactly()
        loop.assert_nothing_left()

    _loop(loop, one)


def test_restores_killed(loop: Loop) -> None:
    disk = _disk(loop.root / "disk.raw", tracked=False)
    snapshot = loop.backup(disk)
    target = loop.root / "target.raw"
    old = b"the disk before the restore\n" * 1000
    args = ("restore", snapshot, target, "--repo", loop.repo, "--force", "--no-progress")
    target.write_bytes(old)
    span = loop.timed(*args)

    def one(_: int) -> None:
        target.write_bytes(old)
        loop.kill(span, *args)
        assert target.read_bytes() == old or _same(target, loop.references[snapshot])
        loop.check()
        loop.run(*args)
        assert _same(target, loop.references[snapshot])
        loop.assert_nothing_left()

    _loop(loop, one)


def test_imports_killed(loop: Loop, images, nginx) -> None:
    volume = _disk(loop.root / "disk.raw")
    loop.backup(volume)
    sources = [nginx.publish(images.get("qcow2")), nginx.publish(images.get("raw", "gzip"))]
    expected = [images.reference, images.reference]
    other = loop.root / "other.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", str(other), str(DISK_SIZE)],
        check=True,
        capture_output=True,
    )
    write_random(str(other), 7 * MiB, 2 * MiB)
    sources.append(nginx.publish(other, "other.qcow2"))
    expected.append(other)
    span = loop.timed("import", sources[0], volume, "--no-progress", "--force")

    def one(moment: int) -> None:
        before = loop.root / "before.raw"
        shutil.copyfile(volume, before)
        pick = moment % len(sources)
        loop.kill(span, "import", sources[pick], volume, "--no-progress", "--force")
        assert _same(volume, before) or _same(volume, expected[pick])
        loop.check()
        _scribble(loop, volume, writes=2)
        loop.restores_exactly({loop.backup(volume)})
        loop.run("import", sources[pick], volume, "--no-progress", "--force")
        assert _same(volume, expected[pick])
        loop.assert_nothing_left()

    _loop(loop, one)
