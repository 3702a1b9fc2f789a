"""Fixtures for the export tests: a CA, sparse disks, and export servers and proxies run as
the real `diskferry` command on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from diskferry.export.certs import create_ca

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


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    """A fresh CA."""
    d = tmp_path / "ca"
    create_ca(d)
    return d


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """The export token in a file."""
    p = tmp_path / "token"
    p.write_text(TOKEN + "\n")
    return p


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


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """A 24 MiB sparse disk with three data runs, one ending at the last byte."""
    return make_disk(
        tmp_path / "disk.img",
        24 * MiB,
        [(1 * MiB, 3 * MiB + 5), (10 * MiB + 4096, 64 * 1024), (23 * MiB, MiB)],
    )


@pytest.fixture
def export_factory(
    tmp_path: Path, ca_dir: Path, token_file: Path
) -> Iterator[Callable[..., Running]]:
    """Starts `diskferry export serve` with the given volumes and extra options."""
    running: list[Running] = []

    def start(volumes: dict[str, Path], *extra: str, name: str = "vm1") -> Running:
        args = ["export", "serve", "--name", name, "--token-file", str(token_file)]
        args += ["--cert-dir", str(ca_dir), "--san", "127.0.0.1", "--san", "localhost"]
        for vol, path in volumes.items():
            args += ["--volume", f"{vol}={path}"]
        log = tmp_path / f"export-{len(running)}.log"
        r = start_diskferry([*args, *extra], log, ca_dir / "ca.crt")
        running.append(r)
        return r

    yield start
    for r in running:
        r.stop()


@pytest.fixture
def export(export_factory: Callable[..., Running], disk: Path) -> Running:
    """An export server for `disk` as volume `disk`."""
    return export_factory({"disk": disk})


@pytest.fixture
def proxy_factory(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """Starts `diskferry proxy serve` with its own CA on a routes file."""
    running: list[Running] = []
    proxy_ca = tmp_path / "proxy-ca"
    create_ca(proxy_ca)

    def start(routes: Path, *extra: str) -> Running:
        args = ["proxy", "serve", "--routes", str(routes), "--cert-dir", str(proxy_ca)]
        args += ["--san", "127.0.0.1", *extra]
        r = start_diskferry(args, tmp_path / f"proxy-{len(running)}.log", proxy_ca / "ca.crt")
        running.append(r)
        return r

    yield start
    for r in running:
        r.stop()


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
