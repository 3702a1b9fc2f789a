"""diskferry servers run as the real command on 127.0.0.1, on a port they pick and print."""

from __future__ import annotations

import contextlib
import signal
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


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


def send_raw(server: Running, raw: bytes) -> bytes:
    """Send the bytes `raw` to `server` on a new TLS connection; what came back before it
    closed (a server that stops reading and closes may have answered all the same)."""
    context = ssl.create_default_context(cafile=str(server.ca))
    plain = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    got = b""
    with context.wrap_socket(plain, server_hostname="127.0.0.1") as conn:
        with contextlib.suppress(OSError):
            conn.sendall(raw)
        with contextlib.suppress(OSError):
            while chunk := conn.recv(65536):
                got += chunk
    return got
