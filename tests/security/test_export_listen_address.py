"""`proxy serve`, `export serve` and `upload serve` listen on loopback unless given --address."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from diskferry.serving.certs import create_ca

TOKEN = "listen-address-token"
_LISTEN = "0A"  # the state of a listening socket in /proc/net/tcp


def _listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp and tcp6 give them) listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == _LISTEN and int(hex_port, 16) == port:
                found.add(address)
    return found


def _serve(args: list[str], log: Path) -> tuple[subprocess.Popen[str], int]:
    """Run `diskferry ARGS --port 0` (no --address) and read the port it prints."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "diskferry.cli.main", *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise AssertionError(f"server did not start: {line!r} {log.read_text()}")
    return proc, int(line)


@pytest.fixture
def setup(tmp_path: Path) -> Path:
    """A CA, a token file, a routes file and a disk in `tmp_path`."""
    create_ca(tmp_path / "ca")
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "routes.yaml").write_text("exports: []\n")
    with open(tmp_path / "disk.img", "wb") as f:
        f.truncate(1 << 20)
    return tmp_path


def _commands(d: Path) -> dict[str, list[str]]:
    tls = ["--cert-dir", str(d / "ca"), "--san", "127.0.0.1"]
    return {
        "proxy": ["proxy", "serve", "--routes", str(d / "routes.yaml"), "--processes", "1", *tls],
        "export": [
            *("export", "serve", "--name", "vm1", "--token-file", str(d / "token")),
            *("--volume", f"disk={d / 'disk.img'}", *tls),
        ],
        "upload": ["upload", "serve", str(d / "disk.img"), "--token-file", str(d / "token"), *tls],
    }


@pytest.mark.parametrize("command", ["proxy", "export", "upload"])
def test_a_server_listens_on_loopback_only_by_default(setup: Path, command: str) -> None:
    proc, port = _serve(_commands(setup)[command], setup / f"{command}.log")
    try:
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and nothing else
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
