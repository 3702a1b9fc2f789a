"""Backup benchmarks: diskferry with changed-block tracking against restic and borg.

Each round starts every tool on a fresh repository: a full backup of the benchmark disk,
then 1,280 scattered 64 KiB writes through the CBT overlay (so into the raw file the peers
read: their input is the same bytes), an incremental backup, and a restore of that last point.
Every run starts after a sync, and each round another tool goes first.
"""

from __future__ import annotations

import abc
import json
import os
import random
import shutil
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from benchmarks.bench_import import DISKFERRY
from benchmarks.data import data_runs, fill, make_disk
from benchmarks.measure import Comparison, Run, ranked, run_process

PASSWORD = "bench-backup-password"
WRITES = 1280
WRITE_SIZE = 64 << 10
_ZSTD_LEVEL = 3
BORG_FIXED_SPARSE = "--chunker-params fixed,4194304 --sparse"


def tree_size(path: Path) -> int:
    """Bytes in all files under `path`."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _sync_files(directory: Path) -> str:
    """A shell command that fsyncs every file under `directory` (diskferry fsyncs its output)."""
    return f"find {directory} -type f -exec sync {{}} +"


@dataclass
class Tool(abc.ABC):
    """One backup program: how it inits a repository, backs the disk up, and restores."""

    name: str
    root: Path
    env: dict[str, str]
    disk: Path

    @property
    def repo(self) -> Path:
        """Its repository."""
        return self.root / f"repo-{self.name.replace(' ', '-')}"

    @property
    def log(self) -> Path:
        """Where its commands' messages go."""
        return self.root / f"{self.repo.name}.log"

    def run(self, cmd: list[str] | str, **kwargs) -> Run:
        """Run and measure one of its commands with its environment, stderr to its log."""
        with open(self.log, "a") as log:
            return run_process(cmd, env=self.env, stderr=log, **kwargs)

    def prepare(self, cmd: list[str] | str) -> None:
        """Run one of its commands unmeasured, stdout and stderr to its log."""
        with open(self.log, "a") as log:
            shell = isinstance(cmd, str)
            subprocess.run(cmd, shell=shell, env=self.env, stdout=log, stderr=log, check=True)

    @abc.abstractmethod
    def init(self) -> None:
        """A fresh, empty repository."""

    @abc.abstractmethod
    def backup(self, point: int) -> Run:
        """Back the disk up as point `point`."""

    @abc.abstractmethod
    def restore(self, point: int, out: Path) -> Run:
        """Restore point `point` into the directory `out`, synced."""


class Diskferry(Tool):
    """diskferry on the CBT overlay of the disk."""

    results: list[dict]

    def init(self) -> None:
        if Path(f"{self.disk}.cbt.qcow2").exists():
            self.prepare([*DISKFERRY, "cbt", "disable", str(self.disk)])
        self.prepare([*DISKFERRY, "cbt", "enable", str(self.disk)])
        self.prepare([*DISKFERRY, "repo", "init", "--repo", str(self.repo)])
        self.results = []

    def backup(self, point: int) -> Run:
        out = self.root / "backup.json"
        cmd = [*DISKFERRY, "backup", "--repo", str(self.repo), "--vm", "bench"]
        cmd += ["--disk", f"disk={self.disk}.cbt.qcow2", "--no-progress", "--json"]
        with open(out, "w") as f:
            run = self.run(cmd, stdout=f)
        self.results.append(json.loads(out.read_text())["disks"][0])
        return run

    def restore(self, point: int, out: Path) -> Run:
        cmd = [*DISKFERRY, "restore", "latest", str(out / "disk.raw"), "--repo", str(self.repo)]
        return self.run([*cmd, "--vm", "bench", "--disk", "disk", "--no-progress"])


class Restic(Tool):
    """restic backing up the raw file (0.14 restores without holes)."""

    def _cmd(self) -> str:
        return f"restic -q -r {self.repo} --cache-dir {self.root / 'restic-cache'}"

    def init(self) -> None:
        self.prepare(f"{self._cmd()} init")

    def backup(self, point: int) -> Run:
        return self.run(f"{self._cmd()} backup {self.disk}")

    def restore(self, point: int, out: Path) -> Run:
        return self.run(f"{self._cmd()} restore latest --target {out} && {_sync_files(out)}")


@dataclass
class Borg(Tool):
    """borg backing up the raw file with the given chunker, extracting with holes."""

    options: str = ""

    def init(self) -> None:
        self.prepare(f"borg init -e repokey {self.repo}")

    def backup(self, point: int) -> Run:
        return self.run(f"borg create {self.options} {self.repo}::p{point} {self.disk}")

    def restore(self, point: int, out: Path) -> Run:
        return self.run(
            f"borg extract --sparse {self.repo}::p{point} && {_sync_files(out)}", cwd=out
        )


@dataclass
class Change:
    """Writes of `size` bytes: where each goes, its bytes in a file, and their zstd size."""

    size: int
    writes: list[tuple[int, Path]] = field(default_factory=list)
    compressed: int = 0


def make_change(directory: Path, seed: int, writes: int = WRITES, size: int = WRITE_SIZE) -> Change:
    """`writes` distinct `size`-aligned places inside the data, each with new, distinct bytes."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rng = random.Random(seed)
    runs = data_runs()
    if writes > sum(length // size for _, length in runs):
        raise ValueError(f"{writes} writes of {size} bytes do not fit in the disk's data")
    places: set[int] = set()
    while len(places) < writes:
        start, length = rng.choice(runs)
        places.add(start + rng.randrange(length // size) * size)
    change = Change(size)
    cctx = zstandard.ZstdCompressor(level=_ZSTD_LEVEL)
    for i, offset in enumerate(sorted(places)):
        data = fill(rng, size)
        path = directory / f"{i:05d}.bin"
        path.write_bytes(data)
        change.writes.append((offset, path))
        change.compressed += len(cctx.compress(data))
    return change


def apply_change(change: Change, overlay: Path) -> None:
    """All the writes through the CBT overlay, in one qemu-io process."""
    cmd = ["qemu-io", "-f", "qcow2"]
    for offset, path in change.writes:
        cmd += ["-c", f"write -q -s {path} {offset} {change.size}"]
    subprocess.run([*cmd, str(overlay)], check=True)


def _startup(env: dict[str, str]) -> float:
    """Median seconds of `diskferry --help`: the process start-up every command pays."""
    runs = [run_process([*DISKFERRY, "--help"], env=env, stdout=subprocess.DEVNULL) for _ in "123"]
    return statistics.median(r.seconds for r in runs)


def _rows(
    job: str, runs: dict[str, list[Run]], ours: str, note: Callable[[Comparison], str]
) -> list[tuple[Comparison, str]]:
    """One row per peer, the best peer (lowest median) first, with the goal on its row."""
    peers = {name: r for name, r in runs.items() if name != ours}
    cmps = [Comparison(f"{job} vs {name}", runs[ours], r) for name, r in peers.items()]
    return ranked(cmps, note)


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


@dataclass
class Workspace:
    """A benchmark's folder: a sparse copy of the disk, the tools' environment, and the tools,
    diskferry first."""

    root: Path
    disk: Path
    env: dict[str, str]
    ours: Diskferry
    peers: list[Tool]


def workspace(source: Path, root: Path, borg_defaults: bool = True) -> Workspace:
    """`root` made anew with a sparse copy of the disk `source`, and diskferry, restic, borg
    with its defaults (unless not asked) and borg fixed+sparse set to back it up."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    disk = root / "disk.raw"
    subprocess.run(["cp", "--sparse=always", str(source), str(disk)], check=True)
    env = {
        **os.environ,
        "DISKFERRY_PASSWORD": PASSWORD,
        "RESTIC_PASSWORD": PASSWORD,
        "BORG_PASSPHRASE": PASSWORD,
        "BORG_BASE_DIR": str(root / "borg-base"),
    }
    peers: list[Tool] = [Restic("restic", root, env, disk)]
    if borg_defaults:
        peers.append(Borg("borg", root, env, disk))
    peers.append(Borg("borg fixed+sparse", root, env, disk, BORG_FIXED_SPARSE))
    return Workspace(root, disk, env, Diskferry("diskferry", root, env, disk), peers)


def run(workdir: Path, rounds: int) -> list[tuple[Comparison, str]]:
    """Full, incremental and restore comparisons against the best of restic and borg."""
    space = workspace(
        make_disk((workdir / "data").resolve())["raw"], (workdir / "backup").resolve()
    )
    root, disk, env, ours, peers = space.root, space.disk, space.env, space.ours, space.peers
    jobs = ("full", "incremental", "restore")
    times: dict[str, dict[str, list[Run]]] = {j: {t.name: [] for t in [ours, *peers]} for j in jobs}
    growth: dict[str, list[int]] = {t.name: [] for t in [ours, *peers]}
    compressed: list[int] = []
    results: list[dict] = []
    out = root / "restored"
    for r in range(rounds):
        # each round another tool goes first, and each run starts with nothing of the run
        # before it still being written back
        tools = [ours, *peers]
        tools = tools[r % len(tools) :] + tools[: r % len(tools)]
        for tool in tools:
            shutil.rmtree(tool.repo, ignore_errors=True)
            tool.init()
        for tool in tools:
            os.sync()
            times["full"][tool.name].append(tool.backup(0))
        change = make_change(root / "writes", seed=r)
        apply_change(change, Path(f"{disk}.cbt.qcow2"))
        compressed.append(change.compressed)
        for tool in tools:
            before = tree_size(tool.repo)
            os.sync()
            times["incremental"][tool.name].append(tool.backup(1))
            growth[tool.name].append(tree_size(tool.repo) - before)
        results += ours.results
        for tool in tools:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            os.sync()
            times["restore"][tool.name].append(tool.restore(1, out))
            if tool is ours:
                allocated = os.stat(out / "disk.raw").st_blocks * 512
        shutil.rmtree(out)
    startup = _startup(env)
    ours_growth = statistics.median(growth[ours.name])
    changed = statistics.median(compressed)
    restic_growth = statistics.median(growth["restic"])
    inc_seconds = statistics.median(r["seconds"] for r in results if r["type"] == "incremental")
    if any(r["type"] != "full" for r in results[::2]) or any(
        r["type"] != "incremental" for r in results[1::2]
    ):
        raise RuntimeError(f"diskferry did not back up full, then incremental: {results}")
    peer_growth = ", ".join(f"{t.name} +{_mib(statistics.median(growth[t.name]))}" for t in peers)

    def incremental_note(c: Comparison) -> str:
        after = (c.ours_median - startup) / c.peer_median
        return (
            f"goal: ratio <= 0.25; after start-up ({startup:.2f} s) {after:.3f}, goal <= 0.1 "
            f"(engine's own disk time {inc_seconds:.2f} s); repository +{_mib(ours_growth)} = "
            f"{ours_growth / changed:.2f} x the changed bytes zstd-compressed "
            f"({_mib(changed)}, goal <= 1.2) and {ours_growth / restic_growth:.2f} x restic's "
            f"(goal <= 0.3); {peer_growth}"
        )

    sparse = allocated / (os.stat(disk).st_blocks * 512)
    rows = _rows("full backup", times["full"], ours.name, lambda c: "goal: ratio <= 0.7")
    rows += _rows("incremental (1 %)", times["incremental"], ours.name, incremental_note)
    rows += _rows(
        "restore last point",
        times["restore"],
        ours.name,
        lambda c: f"goal: ratio <= 0.5; output allocated = {sparse:.3f} x the disk's",
    )
    for tool in [ours, *peers]:
        shutil.rmtree(tool.repo, ignore_errors=True)
    shutil.rmtree(root)
    return rows
