"""Helpers of the export tests: the token, sparse disks, curl, and diskferry servers run as
the real command on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

TOKEN = "s3cret-token-value"
MiB = 1 << 20


@dataclass
class Running:
    """A diskferry server process and where it listens."""

    proc: subprocess.Popen[str]
    port: int
    log: Path
    ca: Path
    url: str = field(init=False)

    def __post_init__(self) -> None:
        self.url = f"https://127.0.0.1:{self.port}"

    def stop(self) -> int:
        """SIGTERM and wait; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def start_diskferry(args: list[str], log: Path, ca: Path) -> Running:
    """Run `diskferry ARGS` listening on a free port; wait for it to print the port."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "diskferry.cli.main",
                *args,
                "--address",
                "127.0.0.1",
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise AssertionError(f"server did not start: {line!r} {log.read_text()}")
    return Running(proc, int(line), log, ca)


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
