"""Timing whole processes with their peak RSS, alternating with a peer, reporting medians."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Run:
    """One process run: wall seconds, peak resident memory in bytes, and CPU seconds (user and
    system, its children's included) where they were counted."""

    seconds: float
    peak_rss: int
    cpu_seconds: float = 0.0


@dataclass
class Comparison:
    """Runs of diskferry and of its peer on the same job."""

    name: str
    ours: list[Run] = field(default_factory=list)
    peer: list[Run] = field(default_factory=list)

    @property
    def ours_median(self) -> float:
        """Median seconds of diskferry."""
        return statistics.median(r.seconds for r in self.ours)

    @property
    def peer_median(self) -> float:
        """Median seconds of the peer."""
        return statistics.median(r.seconds for r in self.peer)

    @property
    def ratio(self) -> float:
        """diskferry's median time over the peer's."""
        return self.ours_median / self.peer_median

    @property
    def peak_rss(self) -> int:
        """The largest peak RSS of diskferry's runs."""
        return max(r.peak_rss for r in self.ours)


def run_process(args: list[str] | str, **kwargs) -> Run:
    """Run a command (a list, or a shell string) and measure it and its children."""
    shell = isinstance(args, str)
    start = time.monotonic()
    proc = subprocess.Popen(args, shell=shell, **kwargs)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark command failed ({proc.returncode}): {args}")
    return Run(seconds, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime)


def proc_status(pid: int, field: str) -> int:
    """A size field of /proc/<pid>/status (VmHWM, VmRSS, ...) in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) * 1024
    raise KeyError(f"no {field} in /proc/{pid}/status")


def server_peak_rss(pid: int) -> int:
    """The largest peak RSS (VmHWM) among server `pid` and its children: the export proxy's
    other processes, each as large as any diskferry process may be."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return max(proc_status(p, "VmHWM") for p in [pid, *children])


def bytes_written(pid: int) -> int:
    """Bytes process `pid` has written so far, sockets included (wchar of /proc/<pid>/io)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "wchar":
            return int(value)
    raise KeyError(f"no wchar in /proc/{pid}/io")


def alternate_peers(
    name: str,
    ours: Callable[[], Run],
    peers: dict[str, Callable[[], Run]],
    rounds: int,
    before: Callable[[], None] = lambda: None,
) -> list[Comparison]:
    """Run diskferry and each peer `rounds` times, alternating, `before` each run; one
    comparison a peer, named `name vs <peer>`."""
    mine: list[Run] = []
    theirs: dict[str, list[Run]] = {peer: [] for peer in peers}
    for _ in range(rounds):
        before()
        mine.append(ours())
        for peer, command in peers.items():
            before()
            theirs[peer].append(command())
    return [Comparison(f"{name} vs {peer}", mine, runs) for peer, runs in theirs.items()]


def alternate(
    name: str,
    ours: Callable[[], Run],
    peer: Callable[[], Run],
    rounds: int,
    before: Callable[[], None] = lambda: None,
) -> Comparison:
    """Run diskferry and the peer `rounds` times each, alternating, `before` each run."""
    [result] = alternate_peers(name, ours, {"": peer}, rounds, before)
    result.name = name
    return result


def ranked(
    comparisons: list[Comparison], note: Callable[[Comparison], str]
) -> list[tuple[Comparison, str]]:
    """One row a peer: the best (lowest median) first, with `note` (its goal), then the rest."""
    best, *rest = sorted(comparisons, key=lambda c: c.peer_median)
    first = f"best peer; {note(best)}" if rest else note(best)
    return [(best, first)] + [(c, "") for c in rest]
