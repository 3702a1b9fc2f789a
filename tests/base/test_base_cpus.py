"""usable_cpus: the CPU affinity, capped by the cgroup v2 quota of its cgroup and those above."""

import os
import subprocess
import sys
from pathlib import Path

from diskferry.base.cpus import usable_cpus


def cgroups(tmp_path: Path, own: str, limits: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup v2 tree with `cpu.max` files, and a /proc/self/cgroup naming `own`."""
    root = tmp_path / "cgroup"
    for folder, limit in limits.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "cpu.max").write_text(limit + "\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


def test_one_cpu_of_affinity_is_one_usable_cpu():
    code = "from diskferry.base.cpus import usable_cpus; print(usable_cpus())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "1"
    assert usable_cpus() == len(os.sched_getaffinity(0))  # no cgroup v2 quota here


def test_the_smallest_quota_on_the_way_up_counts_rounded_up(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    root, proc = cgroups(tmp_path, "/a/b", {"a": "150000 100000", "a/b": "max 100000"})
    assert usable_cpus(root, proc) == min(affinity, 2)
    root, proc = cgroups(tmp_path / "x", "/a/b", {"a": "max 100000", "a/b": "50000 100000"})
    assert usable_cpus(root, proc) == 1
    root, proc = cgroups(tmp_path / "y", "/a", {"a": "max 100000"})
    assert usable_cpus(root, proc) == affinity


def test_outside_cgroup_v2_only_affinity_counts(tmp_path):
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:memory:/x\n1:cpu:/\n")
    assert usable_cpus(tmp_path, proc) == len(os.sched_getaffinity(0))
    assert usable_cpus(tmp_path, tmp_path / "missing") == len(os.sched_getaffinity(0))
