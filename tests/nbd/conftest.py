"""Fixtures that start real NBD servers (qemu-nbd, qemu-storage-daemon, nbdkit) for the tests."""

from __future__ import annotations

import itertools
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from nbd_helpers import Server, unix_url

_START_TIMEOUT = 15.0
_numbers = itertools.count()


def _reachable(address: str | tuple[str, int]) -> bool:
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.connect(address)
        except OSError:
            return False
    return True


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start a server command and wait until `address` takes connections; stop all at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], address: str | tuple[str, int], url: str) -> Server:
        log = open(tmp_path / f"server-{len(procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        procs.append(proc)
        deadline = time.monotonic() + _START_TIMEOUT
        while not _reachable(address):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (tmp_path / f"server-{len(procs) - 1}.log").read_text(errors="replace")
                pytest.fail(f"{argv[0]} did not start: {text}")
            time.sleep(0.01)
        return Server(proc, url)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture
def qemu_nbd(serve: Callable[..., Server], tmp_path: Path) -> Callable[..., Server]:
    """Serve an image with qemu-nbd over a Unix socket: qemu_nbd(image, fmt, *extra)."""

    def start(image: Path, fmt: str = "raw", *extra: str) -> Server:
        sock = tmp_path / f"qemu-nbd-{next(_numbers)}.sock"
        argv = ["qemu-nbd", "--persistent", "--shared=8", f"--socket={sock}", "-f", fmt]
        return serve([*argv, "--discard=unmap", *extra, str(image)], str(sock), unix_url(sock))

    return start


@pytest.fixture
def nbdkit(serve: Callable[..., Server], tmp_path: Path) -> Callable[..., Server]:
    """Serve a plugin with nbdkit over a Unix socket: nbdkit("memory", "64M", filters=[...])."""

    def start(*args: str, filters: tuple[str, ...] = ()) -> Server:
        sock = tmp_path / f"nbdkit-{next(_numbers)}.sock"
        flags = [f"--filter={f}" for f in filters]
        argv = ["nbdkit", "-f", "-U", str(sock), *flags, *args]
        return serve(argv, str(sock), unix_url(sock))

    return start
