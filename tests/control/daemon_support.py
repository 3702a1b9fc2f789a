"""A real `diskferry serve` in a subprocess on a free port, and kubectl pointed at it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

STARTUP_SECONDS = 30


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Served:
    """A running daemon: its process, data directory, port and log file."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    port: int
    log: Path

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig the daemon wrote."""
        return self.data_dir / "kubeconfig"

    def token(self) -> str:
        """The bearer token the daemon keeps."""
        return (self.data_dir / "token").read_text().strip()

    def stop(self) -> int:
        """Stop the daemon and every worker it started (`diskferry serve --stop`); the daemon's
        exit code."""
        command = [sys.executable, "-m", "diskferry.cli.main", "serve", "--stop"]
        subprocess.run([*command, "--data-dir", str(self.data_dir)], check=True, timeout=300)
        return self.process.wait(timeout=30)


def start_daemon(
    data_dir: Path,
    log: Path,
    port: int | None = None,
    options: tuple[str, ...] = ("--no-controllers",),
) -> Served:
    """Start `diskferry serve` (with `options`: by default without controllers) and wait until
    it has written a kubeconfig for this run."""
    port = port or free_port()
    stale = data_dir / "kubeconfig"
    stale.unlink(missing_ok=True)
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "diskferry.cli.main",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                str(port),
                *options,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + STARTUP_SECONDS
    while not stale.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"diskferry serve did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return Served(process, data_dir, port, log)


def server_of(kubeconfig: Path) -> str:
    """The server URL a kubeconfig names."""
    return yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]


def kubectl(
    daemon: Served, *args: str, stdin: str | None = None, ok: bool = True, timeout: float = 60
) -> str:
    """Run kubectl against the daemon, for `timeout` seconds at most; its stdout (stdout and
    stderr when `ok` is False)."""
    command = [
        "kubectl",
        "--kubeconfig",
        str(daemon.kubeconfig),
        "--cache-dir",
        str(daemon.data_dir.parent / "kube-cache"),
        *args,
    ]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert done.returncode == 0, done.stderr
        return done.stdout
    assert done.returncode != 0, done.stdout
    return done.stdout + done.stderr
