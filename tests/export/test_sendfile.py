"""A file volume over the export server's Unix socket goes out by sendfile(2): exact, counted,
and a client that goes away, stalls, or outlives the server loses nothing of the server's."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from export_support import TOKEN, MiB, curl

from diskferry.serving.sendfile import _send

AUTH = f"x-kubevirt-export-token: {TOKEN}"
REQUEST = f"GET /volumes/disk/disk.img HTTP/1.1\r\nHost: localhost\r\n{AUTH}\r\n\r\n".encode()


def _traced(pid: int, log: Path) -> subprocess.Popen[bytes]:
    """strace following `pid`'s threads' sendfile calls, attached before this returns."""
    tracer = subprocess.Popen(
        ["strace", "-f", "-qq", "-e", "trace=sendfile", "-o", str(log), "-p", str(pid)],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        if re.search(r"^TracerPid:\s+[1-9]", status, re.M):
            return tracer
        time.sleep(0.02)
    tracer.kill()
    raise AssertionError("strace did not attach")


def _sent_by_sendfile(log: Path) -> int:
    return sum(int(n) for n in re.findall(r"sendfile\(.*\)\s+=\s+(\d+)", log.read_text()))


def _access_logged(log: Path, lines: int) -> list[tuple[str, str]]:
    """The status and bytes of the disk's GETs in the access log, once it has `lines` of them:
    a line is written after its response went out, so a client may have it all before."""
    deadline = time.monotonic() + 10
    while True:
        logged = re.findall(r'"GET /volumes/disk/disk.img" (\d+) (\d+) ', log.read_text())
        if len(logged) >= lines or time.monotonic() > deadline:
            return logged
        time.sleep(0.05)


def _head_and_stall(sock_path: Path) -> socket.socket:
    """A connection that asked for the disk, read its headers, and reads no more."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.connect(str(sock_path))
    client.sendall(REQUEST)
    head = b""
    while b"\r\n\r\n" not in head:
        head += client.recv(1)
    assert head.startswith(b"HTTP/1.1 200")
    return client


def test_a_file_volume_goes_by_sendfile_exact_and_counted(
    export_factory, tmp_path: Path, disk: Path
) -> None:
    sock = tmp_path / "run" / "vm1.sock"
    export = export_factory({"disk": disk}, "--unix-socket", str(sock))
    data = disk.read_bytes()
    for _ in range(40):  # more than its sending threads: each one given back when its client goes
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
            gone.connect(str(sock))
            gone.sendall(REQUEST)
            assert gone.recv(65536)
    trace = tmp_path / "sendfile.log"
    tracer = _traced(export.proc.pid, trace)
    whole = curl("--unix-socket", str(sock), "-H", AUTH, "http://localhost/volumes/disk/disk.img")
    ranged = curl(
        "--unix-socket",
        str(sock),
        "-H",
        AUTH,
        "-H",
        "Range: bytes=1048570-1048699",
        "http://localhost/volumes/disk/disk.img",
    )
    tracer.terminate()
    tracer.wait()
    assert whole.stdout == data
    assert ranged.stdout == data[1048570:1048700]
    assert _sent_by_sendfile(trace) == len(data) + 130
    # what the access log counts: the headers and the body
    logged = _access_logged(export.log, 42)  # the 40 that went, and the two read whole
    assert any(s == "200" and len(data) < int(n) < len(data) + 1024 for s, n in logged)
    assert any(s == "206" and 130 < int(n) < 130 + 1024 for s, n in logged)


def test_a_client_that_takes_nothing_is_cut_after_the_idle_limit(
    export_factory, tmp_path: Path, disk: Path
) -> None:
    sock = tmp_path / "run" / "vm1.sock"
    export_factory({"disk": disk}, "--unix-socket", str(sock), "--idle-timeout", "1s")
    with _head_and_stall(sock) as stalled:
        time.sleep(3)
        body = b""
        stalled.settimeout(30)
        while chunk := stalled.recv(1 << 20):
            body += chunk
    assert 0 < len(body) < disk.stat().st_size
    whole = curl("--unix-socket", str(sock), "-H", AUTH, "http://localhost/volumes/disk/disk.img")
    assert whole.stdout == disk.read_bytes()


def test_a_server_stopped_under_a_stalled_client_ends_within_its_grace(
    export_factory, tmp_path: Path, disk: Path
) -> None:
    sock = tmp_path / "run" / "vm1.sock"
    export = export_factory({"disk": disk}, "--unix-socket", str(sock), "--grace", "1s")
    with _head_and_stall(sock):
        started = time.monotonic()
        assert export.stop() == 0
        assert time.monotonic() - started < 20  # the idle limit is 60 s


def _socketpair() -> tuple[socket.socket, socket.socket]:
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    return ours, theirs


def test_a_send_told_to_stop_stops_and_closes_its_socket(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.write_bytes(os.urandom(4 * MiB))
    ours, theirs = _socketpair()
    stop = threading.Event()
    counted: list[int] = []
    with open(source, "rb") as f, theirs:
        sending = threading.Thread(
            target=_send,
            args=(os.dup(ours.fileno()), f.fileno(), 0, 4 * MiB, stop, 60.0, counted.append),
        )
        sending.start()
        time.sleep(0.5)  # it sent what the socket holds and waits for room
        stop.set()
        sending.join(5)
        assert not sending.is_alive()
    ours.close()
    assert 0 < sum(counted) < 4 * MiB


def test_a_send_nobody_reads_times_out_and_one_read_whole_is_exact(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.write_bytes(os.urandom(4 * MiB))
    with open(source, "rb") as f:
        ours, theirs = _socketpair()
        with ours, theirs, pytest.raises(TimeoutError):
            _send(os.dup(ours.fileno()), f.fileno(), 0, 4 * MiB, threading.Event(), 0.4, id)
        ours, theirs = _socketpair()
        received = bytearray()

        def read() -> None:
            while chunk := theirs.recv(1 << 20):
                received.extend(chunk)

        reader = threading.Thread(target=read)
        reader.start()
        counted: list[int] = []
        with ours:
            _send(
                os.dup(ours.fileno()),
                f.fileno(),
                MiB,
                2 * MiB + 7,
                threading.Event(),
                5.0,
                counted.append,
            )
        reader.join(10)
        theirs.close()
    assert bytes(received) == source.read_bytes()[MiB : 3 * MiB + 7]
    assert sum(counted) == 2 * MiB + 7
