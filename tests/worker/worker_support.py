"""Helpers of the worker tests: job files, workers run as `python -m ...` child processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODULES = {
    "import": "diskferry.importer.worker",
    "upload": "diskferry.importer.worker",
    "backup": "diskferry.backup.worker",
    "export": "diskferry.export.worker",
}


def job_file(directory: Path, job: dict[str, Any] | str, name: str = "job.json") -> Path:
    """A job file holding `job` (JSON, or the text given as is)."""
    path = directory / name
    path.write_text(job if isinstance(job, str) else json.dumps(job))
    return path


@dataclass
class Finished:
    """What a worker printed and how it exited."""

    code: int
    stdout: list[str]
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        """The last stdout line, which must be the JSON result."""
        assert self.stdout, self.stderr
        return json.loads(self.stdout[-1])

    def assert_one_log_line_of_failure(self) -> None:
        """A failure is told once on stderr, never with a traceback."""
        assert "Traceback" not in self.stderr, self.stderr
        assert len([ln for ln in self.stderr.splitlines() if ln.startswith("ERROR")]) == 1


@dataclass
class Running:
    """A worker that printed its port and is still at work."""

    proc: subprocess.Popen[str]
    port: int
    address: str = "127.0.0.1"

    def get(self, path: str) -> bytes:
        """GET `path` of the worker's status server."""
        with urllib.request.urlopen(f"http://{self.address}:{self.port}{path}", timeout=5) as r:
            return r.read()

    def progress(self) -> dict[str, Any]:
        """The /progress document."""
        return json.loads(self.get("/progress"))

    def wait_for(self, what: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict:
        """Poll /progress until `what` holds for it; that document."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "the worker ended early"
            state = self.progress()
            if what(state):
                return state
            time.sleep(0.05)
        raise AssertionError(f"the worker's progress never got there: {state}")

    def finish(self, sig: int | None = None, timeout: float = 60) -> Finished:
        """Send `sig` (if given) and collect the output."""
        if sig is not None:
            self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        return Finished(self.proc.returncode, [f'{{"port": {self.port}}}', *out.splitlines()], err)


def _command(engine: str, job: Path) -> list[str]:
    return [sys.executable, "-m", MODULES[engine], str(job)]


def _first_line(proc: subprocess.Popen[str]) -> str:
    """The first stdout line, read from the pipe a byte at a time: a buffered read could take
    later lines too, and `communicate` with a timeout reads the pipe, not that buffer."""
    assert proc.stdout is not None
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(proc.stdout.fileno(), 1)
        if not byte:
            break
        line += byte
    return line.decode()


def start(engine: str, job: Path, env: dict[str, str] | None = None) -> Running:
    """Start the worker of `engine` on `job` and read its first line, the port."""
    proc = subprocess.Popen(
        _command(engine, job),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=job.parent,
    )
    first = _first_line(proc)
    if not first.startswith('{"port"'):
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"the worker did not start: {first}{out} {err}")
    return Running(proc, json.loads(first)["port"])


def run(
    engine: str, job: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> Finished:
    """Run the worker of `engine` on `job` to its end."""
    proc = subprocess.run(
        _command(engine, job),
        capture_output=True,
        text=True,
        env=env,
        cwd=job.parent,
        timeout=timeout,
    )
    return Finished(proc.returncode, proc.stdout.splitlines(), proc.stderr)


def free_loopback() -> str:
    """A loopback address other than 127.0.0.1 with nothing listening on it (as the stand-in
    kubelet gives a Pod)."""
    for last in range(2, 250):
        address = f"127.0.{os.getpid() % 200 + 1}.{last}"
        with socket.socket() as probe:
            try:
                probe.bind((address, 0))
            except OSError:
                continue
            return address
    raise AssertionError("no loopback address is free")
