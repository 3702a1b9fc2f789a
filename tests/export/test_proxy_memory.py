"""The export proxy's memory: what a relayed stream leaves behind on a client connection."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest
from export_support import TOKEN, MiB, make_disk, write_routes

PREFIX = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/vm1"
CONNECTIONS = 120


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _connect(port: int, context: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.socket()
    # a small receive window makes the proxy hold what the client has not read yet
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 10)
    raw.connect(("127.0.0.1", port))
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def _send_get(conn: ssl.SSLSocket, path: str) -> None:
    head = f"GET {PREFIX}{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nx-kubevirt-export-token: {TOKEN}\r\n"
    conn.sendall(head.encode() + b"\r\n")


def _read_answer(conn: ssl.SSLSocket) -> tuple[bytes, int]:
    """The status line of one answer, and its body's length (read to the end, in small reads)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = next(
        int(v) for k, _, v in (h.partition(": ") for h in lines) if k.lower() == "content-length"
    )
    got = len(body)
    while got < length:
        got += len(conn.recv(16 << 10))
    return lines[0].encode(), got


@pytest.mark.long
def test_slow_readers_leave_no_large_buffers_on_kept_connections(
    export_factory, proxy_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = 4 * MiB
    volume = make_disk(tmp_path / "v.img", size, [(0, size)])
    backend = export_factory({"disk": volume})
    routes = tmp_path / "routes.yaml"
    write_routes(
        routes,
        [{"namespace": "default", "name": "vm1", "url": backend.url, "caFile": str(backend.ca)}],
    )
    # large blocks mapped and unmapped one by one: the proxy's RSS follows what it holds,
    # not what the C heap keeps of what it freed
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", str(64 << 10))
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", str(128 << 10))
    proxy = proxy_factory(routes, "--processes", "1")  # every connection on the one measured
    context = ssl.create_default_context(cafile=str(proxy.ca))
    conns = [_connect(proxy.port, context) for _ in range(CONNECTIONS)]
    for conn in conns:
        _send_get(conn, "/volumes/disk/extents")
        assert _read_answer(conn)[0].startswith(b"HTTP/1.1 200")
    before = _rss(proxy.proc.pid)
    # every request is sent before any body is read: each stream meets a client that lags
    for conn in conns:
        _send_get(conn, "/volumes/disk/disk.img")
    for conn in conns:
        assert _read_answer(conn) == (b"HTTP/1.1 200 OK", size)
    grown = _rss(proxy.proc.pid) - before
    for conn in conns:
        conn.close()
    # each kept connection may keep some buffers, far less than a stream's worth of bytes
    assert grown <= CONNECTIONS * 320 * 1024, grown
