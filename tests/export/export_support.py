"""Helpers of the export tests: the token, sparse disks, curl, routes files."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

TOKEN = "s3cret-token-value"
MiB = 1 << 20


def make_disk(path: Path, size: int, data: list[tuple[int, int]], seed: int = 1) -> Path:
    """A sparse file of `size` bytes with pseudo-random data at each (offset, length)."""
    import random

    rng = random.Random(seed)
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, length in data:
            f.seek(offset)
            f.write(rng.randbytes(length))
    return path


def write_routes(path: Path, exports: list[dict[str, object]]) -> None:
    """Replace the routes file in one step."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump({"exports": exports}))
    tmp.replace(path)


def curl(*args: str, ca: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run curl (silent, errors shown) with the CA and return the finished process."""
    cmd = ["curl", "-sS", "--max-time", "60"]
    if ca is not None:
        cmd += ["--cacert", str(ca)]
    return subprocess.run([*cmd, *args], capture_output=True, timeout=120)


def open_fds(pid: int) -> int:
    """How many file descriptors process `pid` has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))
