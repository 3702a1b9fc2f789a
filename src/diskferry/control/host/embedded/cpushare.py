"""A VM's share of the host's CPU when the host is busy, from its cores and core fraction: its QEMU
in a cgroup of its own, `diskferry/<namespace>.<name>`, weighted as cores times the fraction of
a plain process (cgroup v2 `cpu.weight`, default 100; v1 `cpu.shares`, default 1024). As with a
Pod's CPU request, the fraction is what the VM is sure to get, not a limit on it."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup")
GROUP = "diskferry"
V2_DEFAULT = 100
V1_DEFAULT = 1024


def _v2() -> Path | None:
    """The unified hierarchy's root when it has the cpu controller."""
    controllers = CGROUPS / "cgroup.controllers"
    try:
        return CGROUPS if "cpu" in controllers.read_text().split() else None
    except OSError:
        return None


def _v1() -> Path | None:
    """The v1 cpu controller's root, when mounted."""
    root = CGROUPS / "cpu"
    return root if (root / "cpu.shares").exists() else None


def _enable_cpu(folder: Path) -> None:
    """Give the children of `folder` the cpu controller (v2)."""
    control = folder / "cgroup.subtree_control"
    if "cpu" not in control.read_text().split():
        control.write_text("+cpu")


def place(pid: int, name: str, cores: int, percent: int) -> str | None:
    """Move the process `pid` into the cgroup `name` weighted for `cores` at `percent`; why it
    could not be done, None when it was."""
    share = cores * percent / 100
    try:
        root = _v2()
        if root is not None:
            _enable_cpu(root)
            group = root / GROUP
            group.mkdir(mode=0o755, exist_ok=True)
            _enable_cpu(group)
            mine = group / name
            mine.mkdir(mode=0o755, exist_ok=True)
            (mine / "cpu.weight").write_text(str(min(max(round(V2_DEFAULT * share), 1), 10000)))
        elif (root := _v1()) is not None:
            mine = root / GROUP / name
            mine.mkdir(mode=0o755, parents=True, exist_ok=True)
            (mine / "cpu.shares").write_text(str(min(max(round(V1_DEFAULT * share), 2), 262144)))
        else:
            return "this host has no cgroup cpu controller"
        (mine / "cgroup.procs").write_text(str(pid))
    except OSError as e:
        return f"the daemon cannot weigh its CPU in a cgroup ({e.strerror or e})"
    return None


def remove(name: str) -> None:
    """Remove the cgroup `name` once its processes are gone (nothing when it is not there)."""
    for root in (CGROUPS, CGROUPS / "cpu"):
        with contextlib.suppress(OSError):
            os.rmdir(root / GROUP / name)
