"""Slow clients cannot hold the daemon: raw TLS sockets against a real daemon that send their
headers a line at a time, their body a byte at a time, or nothing, are cut; connections are
bounded in all and per client address; meanwhile other clients are served."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from daemon_support import free_port

from diskferry.control.apiserver.http.limits import MAX_MUTATING_IN_FLIGHT, Limits
from diskferry.control.daemon import Daemon

PAUSE = 0.25
STEPS = 40  # a slow client's sends: STEPS * PAUSE is many times the short timeouts below
READY_WAITS = 600
SHORT = Limits(header_seconds=1.5, body_seconds=3, body_read_seconds=1.5)
CROWDED = Limits(connections=5, connections_per_client=2)
SECRETS = "/api/v1/namespaces/default/secrets"
CLOSED = (ConnectionError, ssl.SSLError)


def _run(tmp_path: Path, limits: Limits) -> Iterator[Daemon]:
    daemon = Daemon(tmp_path / "data", port=free_port(), limits=limits)
    runner = threading.Thread(target=daemon.run)
    runner.start()
    try:
        for _ in range(READY_WAITS):
            if daemon.kubeconfig_path.exists():
                break
            threading.Event().wait(0.1)
        else:
            raise AssertionError("the daemon did not start")
        yield daemon
    finally:
        daemon.stop()
        runner.join(60)
    assert not runner.is_alive()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon with short header and body timeouts."""
    yield from _run(tmp_path, SHORT)


@pytest.fixture
def crowded(tmp_path: Path) -> Iterator[Daemon]:
    """A daemon that takes few connections, in all and from one address."""
    yield from _run(tmp_path, CROWDED)


def _context(daemon: Daemon) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(daemon.pki.ca_cert))


def _tls(daemon: Daemon, source: str = "127.0.0.1") -> ssl.SSLSocket:
    raw = socket.create_connection(
        ("127.0.0.1", daemon.port), timeout=10, source_address=(source, 0)
    )
    return _context(daemon).wrap_socket(raw, server_hostname="127.0.0.1")


def _get(daemon: Daemon, path: str = "/version", source: str = "127.0.0.1") -> int:
    """The status of a GET from `source`, on a connection of its own."""
    connection = http.client.HTTPSConnection(
        "127.0.0.1", daemon.port, timeout=10, source_address=(source, 0), context=_context(daemon)
    )
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {daemon.token}"})
        return connection.getresponse().status
    finally:
        connection.close()


def _create(daemon: Daemon, name: str) -> int:
    """The status of creating a Secret named `name`."""
    connection = http.client.HTTPSConnection(
        "127.0.0.1", daemon.port, timeout=10, context=_context(daemon)
    )
    body = json.dumps({"metadata": {"name": name}})
    headers = {"Authorization": f"Bearer {daemon.token}", "Content-Type": "application/json"}
    try:
        connection.request("POST", SECRETS, body=body, headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def _answer_or_cut(sock: ssl.SSLSocket, sends: Iterable[bytes]) -> bytes | None:
    """Send each of `sends`, PAUSE apart, reading between (and sending on after an answer):
    what the daemon answered once it closed the connection, None while it keeps it open."""
    sock.settimeout(PAUSE)
    answer = b""
    for chunk in sends:
        try:
            sock.sendall(chunk)
            data = sock.recv(65536)
        except TimeoutError:
            continue
        except CLOSED:
            return answer
        if not data:
            return answer
        answer += data
    return None


def _request_head(token: str | None, length: int) -> bytes:
    lines = [f"POST {SECRETS} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _slow_body(daemon: Daemon, token: str | None) -> bytes | None:
    """A create whose (long) body comes a byte at a time: what the daemon answered before it
    cut the connection, None when it did not."""
    body = json.dumps({"metadata": {"name": "slow"}}).encode().ljust(STEPS * 4)
    sock = _tls(daemon)
    try:
        sock.sendall(_request_head(token, len(body)))
        return _answer_or_cut(sock, (body[i : i + 1] for i in range(STEPS)))
    finally:
        sock.close()


def test_headers_sent_a_line_at_a_time_are_cut(served: Daemon) -> None:
    sock = _tls(served)
    try:
        sock.sendall(b"GET /version HTTP/1.1\r\n")
        lines = (f"X-Slow-{n}: {n}\r\n".encode() for n in range(STEPS))
        assert _answer_or_cut(sock, lines) == b""
    finally:
        sock.close()


def test_a_connection_that_sends_nothing_is_cut(served: Daemon) -> None:
    sock = _tls(served)
    try:
        assert _answer_or_cut(sock, (b"" for _ in range(STEPS))) == b""
    finally:
        sock.close()


def test_a_body_sent_a_byte_at_a_time_is_408_and_frees_its_write_slot(served: Daemon) -> None:
    answers: list[bytes | None] = []
    slow = [
        threading.Thread(target=lambda: answers.append(_slow_body(served, served.token)))
        for _ in range(MAX_MUTATING_IN_FLIGHT)
    ]
    for each in slow:
        each.start()
    assert _get(served, SECRETS) == 200  # reads go on meanwhile
    for each in slow:
        each.join(STEPS * PAUSE * 2)
    assert len(answers) == MAX_MUTATING_IN_FLIGHT
    for answer in answers:
        assert answer is not None and answer.startswith(b"HTTP/1.1 408 ")
        status = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert (status["kind"], status["code"], status["reason"]) == ("Status", 408, "Timeout")
    assert _create(served, "after") == 201


def test_a_body_that_stops_coming_is_408(served: Daemon) -> None:
    body = json.dumps({"metadata": {"name": "stopped"}}).encode()
    sock = _tls(served)
    try:
        sock.sendall(_request_head(served.token, len(body)) + body[:5])
        answer = _answer_or_cut(sock, (b"" for _ in range(STEPS)))
    finally:
        sock.close()
    assert answer is not None and answer.startswith(b"HTTP/1.1 408 ")


def test_a_body_trickled_after_a_401_is_cut(served: Daemon) -> None:
    answer = _slow_body(served, None)
    assert answer is not None and answer.startswith(b"HTTP/1.1 401 ")


def test_connections_from_one_address_are_bounded(crowded: Daemon) -> None:
    held = [_tls(crowded) for _ in range(CROWDED.connections_per_client)]
    try:
        extra = _tls(crowded)
        try:
            assert _answer_or_cut(extra, (b"" for _ in range(STEPS))) == b""
        finally:
            extra.close()
        assert _get(crowded, source="127.0.0.2") == 200
    finally:
        for sock in held:
            sock.close()


def test_connections_in_all_are_bounded(crowded: Daemon) -> None:
    sources = [f"127.0.0.{n}" for n in range(2, 2 + CROWDED.connections)]
    held = [_tls(crowded, source) for source in sources]
    try:
        assert _get(crowded, source="127.0.1.1") == 503
    finally:
        for sock in held:
            sock.close()
