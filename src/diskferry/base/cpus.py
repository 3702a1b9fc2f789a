"""How many CPUs this process may use: its affinity, capped by a cgroup v2 CPU quota."""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def usable_cpus(cgroup_root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> int:
    """The CPUs the process may run on, at most the `cpu.max` quota of its cgroup or any above it.

    `os.cpu_count()` counts the machine's CPUs, which a container or `taskset` may not have.
    """
    cpus = len(os.sched_getaffinity(0))
    quota = _cgroup_quota(cgroup_root, proc_cgroup)
    return max(1, cpus if quota is None else min(cpus, quota))


def _cgroup_quota(root: Path, proc_cgroup: Path) -> int | None:
    """The smallest `cpu.max` quota, in whole CPUs rounded up, from the cgroup up to the root."""
    group = _own_cgroup(proc_cgroup)
    if group is None:
        return None
    quotas = []
    for folder in [group, *group.parents]:
        try:
            fields = (root / folder.relative_to("/") / "cpu.max").read_text().split()
        except OSError:
            continue
        if len(fields) == 2 and fields[0] != "max":
            try:
                limit, period = int(fields[0]), int(fields[1])
            except ValueError:
                continue
            if limit > 0 and period > 0:
                quotas.append(math.ceil(limit / period))
    return min(quotas, default=None)


def _own_cgroup(proc_cgroup: Path) -> PurePosixPath | None:
    """The process's cgroup v2 path (the `0::` line), or None outside cgroup v2."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("0::"):
            return PurePosixPath(line[3:] or "/")
    return None
