"""NbdClient against servers that misbehave: short or overlapping read replies, failed sends,
a handshake dribbled out a byte at a time."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_server import (
    Request,
    answering,
    data_chunk,
    done_chunk,
    handshake_bytes,
    hole_chunk,
    hostile_server,
)
from nbd_helpers import Server, pattern

from diskferry.base.errors import CancelledError
from diskferry.nbd.client import NbdClient
from diskferry.nbd.errors import NbdConnectionError
from diskferry.nbd.handshake import negotiate
from diskferry.nbd.transport import Transport
from diskferry.nbd.url import parse_url

KiB = 1 << 10
MiB = 1 << 20
MARK = 0xEE  # what the read buffer held before; the servers here never send it
JOIN = 20.0


def _read_from(tmp_path: Path, reply: Callable[[Request], bytes], length: int = 64 * KiB):
    """Read `length` bytes at 4 KiB from a server that answers with `reply`; the buffer."""
    buf = bytearray([MARK]) * length
    with (
        hostile_server(tmp_path / "nbd.sock", answering(reply, requests=1)) as url,
        NbdClient.connect(url) as client,
    ):
        client.read_into(4 * KiB, buf)
    return buf


def test_a_whole_reply_in_pieces_is_read(tmp_path: Path) -> None:
    data = b"\x11" * (32 * KiB)

    def reply(r: Request) -> bytes:  # out of order, data and holes
        half = r.length // 2
        return (
            hole_chunk(r.cookie, r.offset + half, half - 100)
            + data_chunk(r.cookie, r.offset + r.length - 100, data[:100])
            + data_chunk(r.cookie, r.offset, data[:half])
            + done_chunk(r.cookie)
        )

    assert _read_from(tmp_path, reply) == data + bytes(32 * KiB - 100) + data[:100]


@pytest.mark.parametrize(
    "reply",
    [
        # data for the first half only, then the end
        lambda r: data_chunk(r.cookie, r.offset, b"\x11" * (r.length // 2)) + done_chunk(r.cookie),
        # the first half twice: as many bytes as asked, and a gap
        lambda r: (
            data_chunk(r.cookie, r.offset, b"\x11" * (r.length // 2))
            + hole_chunk(r.cookie, r.offset, r.length // 2, done=True)
        ),
        # nothing at all
        lambda r: done_chunk(r.cookie),
    ],
    ids=["short", "overlap-hides-a-gap", "empty"],
)
def test_a_read_reply_that_leaves_bytes_out_fails(
    tmp_path: Path, reply: Callable[[Request], bytes]
) -> None:
    with pytest.raises(NbdConnectionError) as caught:
        _read_from(tmp_path, reply)
    assert "broke the protocol" in str(caught.value)
    assert "nbd.sock" in str(caught.value)  # names the server


def test_overlapping_read_chunks_fail(tmp_path: Path) -> None:
    def reply(r: Request) -> bytes:
        three_quarters = r.length * 3 // 4
        return (
            data_chunk(r.cookie, r.offset, b"\x11" * three_quarters)
            + data_chunk(r.cookie, r.offset + r.length // 2, b"\x22" * (r.length // 2))
            + done_chunk(r.cookie)
        )

    with pytest.raises(NbdConnectionError) as caught:
        _read_from(tmp_path, reply)
    assert "overlap" in str(caught.value)


@pytest.mark.parametrize(
    "reply",
    [
        lambda r: data_chunk(r.cookie, r.offset - 1, b"\x11" * r.length, done=True),
        lambda r: data_chunk(r.cookie, r.offset + 1, b"\x11" * r.length, done=True),
        lambda r: hole_chunk(r.cookie, r.offset, r.length + 1, done=True),
        lambda r: hole_chunk(r.cookie, r.offset, 0xFFFFFFFF, done=True),
        lambda r: data_chunk(r.cookie, r.offset, b"", done=True),
    ],
    ids=["before", "past-the-end", "hole-past-the-end", "hole-of-4-GiB", "empty-data"],
)
def test_read_chunks_outside_the_request_fail(
    tmp_path: Path, reply: Callable[[Request], bytes]
) -> None:
    with pytest.raises(NbdConnectionError) as caught:
        _read_from(tmp_path, reply)
    assert "broke the protocol" in str(caught.value)


class _HeldTransport(Transport):
    """A socket whose receiver is held before it reads until `go_on` is set, and that runs
    `before_send` before each send."""

    def __init__(self, transport: Transport) -> None:
        super().__init__(transport.sock)
        self.held = threading.Event()
        self.go_on = threading.Event()
        self.before_send: Callable[[], None] = lambda: None

    def recv_into(self, view: memoryview) -> int:
        if not self.go_on.is_set():
            self.held.set()
            self.go_on.wait()
        return super().recv_into(view)

    def sendall(self, data: bytes | memoryview) -> None:
        self.before_send()
        super().sendall(data)


def _held_client(
    url: str, cancel: threading.Event | None = None
) -> tuple[NbdClient, _HeldTransport]:
    """A client whose receiver waits to read: any reply it gets lands later, when let go."""
    target = parse_url(url)
    transport, info = negotiate(target)
    held = _HeldTransport(transport)
    client = NbdClient(target, held, info, cancel=cancel)
    assert held.held.wait(JOIN)
    return client, held


def _run(outcomes: dict[str, BaseException | None], name: str, action: Callable[[], object]):
    """Start `action` in a thread that records how it ended under `name`."""

    def target() -> None:
        try:
            action()
            outcomes[name] = None
        except BaseException as e:
            outcomes[name] = e

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_a_failed_send_leaves_the_reader_its_buffer_until_the_receiver_lets_go(
    nbdkit: Callable[..., Server],
) -> None:
    server = nbdkit("memory", "4M")
    with NbdClient.connect(server.url) as writer:
        writer.write(0, pattern(MiB, 3))
    client, held = _held_client(server.url)
    buf = bytearray([MARK]) * MiB
    outcomes: dict[str, BaseException | None] = {}
    sends = itertools.count()
    send_failed = threading.Event()

    def fail_but_the_first() -> None:
        if next(sends):
            send_failed.set()
            raise BrokenPipeError("broken pipe")

    held.before_send = fail_but_the_first
    reader = _run(outcomes, "read", lambda: client.read_into(0, buf))
    sender = _run(outcomes, "send", lambda: client.read(MiB, 4096))
    assert send_failed.wait(JOIN)
    reader.join(1.0)
    # the receiver may still fill `buf`: the read must not have given it back yet
    assert reader.is_alive()
    held.go_on.set()
    reader.join(JOIN)
    sender.join(JOIN)
    assert not reader.is_alive() and not sender.is_alive()
    assert isinstance(outcomes["send"], NbdConnectionError)
    assert "sending to NBD server" in str(outcomes["send"])
    if outcomes["read"] is None:
        assert buf == pattern(MiB, 3)
    else:
        assert isinstance(outcomes["read"], NbdConnectionError)
    client.close()


def test_a_read_refused_halfway_waits_for_the_requests_it_sent(
    nbdkit: Callable[..., Server],
) -> None:
    server = nbdkit("memory", "4M", "blocksize-maximum=65536", filters=("blocksize-policy",))
    cancel = threading.Event()
    client, held = _held_client(server.url, cancel)
    held.before_send = cancel.set  # cancelled as the first of the read's two requests goes
    outcomes: dict[str, BaseException | None] = {}
    reader = _run(outcomes, "read", lambda: client.read(0, 128 * KiB))
    reader.join(1.0)
    # the second request was refused, but the first may still fill the buffer
    assert reader.is_alive()
    held.go_on.set()
    reader.join(JOIN)
    assert not reader.is_alive()
    assert isinstance(outcomes["read"], CancelledError)
    client.close()


def test_a_handshake_dribbled_out_fails_at_its_deadline(tmp_path: Path) -> None:
    def dribble(conn: socket.socket) -> None:  # each byte well within the timeout
        for byte in handshake_bytes():
            conn.sendall(bytes([byte]))
            time.sleep(0.05)

    with (
        hostile_server(tmp_path / "nbd.sock", dribble) as url,
        pytest.raises(NbdConnectionError) as caught,
    ):
        NbdClient.connect(url, contexts=["base:allocation"], timeout=1.0)
    assert "did not finish in 1 s" in str(caught.value)
