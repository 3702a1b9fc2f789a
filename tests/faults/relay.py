"""A fault-injecting TCP relay on 127.0.0.1: drop, stall, reset, truncate or flip a byte.

The relay forwards each connection it accepts to one target (a TCP address or a Unix
socket). A `Fault` armed on it breaks some of the following connections once a given number
of bytes has passed in one direction; every other connection is forwarded untouched, so a
retry after the fault reaches the peer as it is.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["drop", "stall", "reset", "truncate", "flip"]
Direction = Literal["down", "up"]  # down: from the peer to diskferry; up: the other way
_PIECE = 64 * 1024
_LINGER_RESET = struct.pack("ii", 1, 0)


@dataclass
class Fault:
    """What to break: `kind` once `at` bytes have passed `direction` on a faulty connection.

    drop closes both sides (FIN); stall stops forwarding and holds both sides open; reset
    aborts both sides (RST); truncate ends the stream in `direction` (FIN to its receiver)
    and lets the other direction go on; flip inverts the byte at `at` and forwards the rest.
    The fault fires at most `times` times, on any connection but the first `skip` after it
    was armed.
    """

    kind: Kind
    at: int = 0
    direction: Direction = "down"
    skip: int = 0
    times: int = 1


@dataclass
class _Link:
    """One relayed connection: diskferry's side and the peer's."""

    client: socket.socket
    peer: socket.socket
    fault: Fault | None
    passed: dict[Direction, int] = field(default_factory=lambda: {"down": 0, "up": 0})
    fired: bool = False


class Relay:
    """Listens on 127.0.0.1 and relays to `target`: (host, port) or a Unix socket path."""

    def __init__(self, target: tuple[str, int] | str) -> None:
        self.target = target
        self.accepted = 0
        self.fired = 0
        self._fault: Fault | None = None
        self._faulty_from = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._links: list[_Link] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="relay", daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        """host:port of the relay."""
        return f"127.0.0.1:{self.port}"

    def arm(self, fault: Fault | None) -> None:
        """Break connections from the next one on as `fault` says; None relays cleanly."""
        with self._lock:
            self._fault = fault
            self._faulty_from = self.accepted
            self.fired = 0

    def close(self) -> None:
        """Stop listening and close every connection."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(5)
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            _close(link.client, link.peer)

    def _fault_for(self, number: int) -> Fault | None:
        fault = self._fault
        if fault is None:
            return None
        return fault if number - self._faulty_from >= fault.skip else None

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                peer = _connect(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                link = _Link(client, peer, self._fault_for(self.accepted))
                self.accepted += 1
                self._links.append(link)
            pump = threading.Thread(target=self._pump, args=(link,), name="relay-link", daemon=True)
            pump.start()

    def _pump(self, link: _Link) -> None:
        sides: dict[socket.socket, tuple[socket.socket, Direction]] = {
            link.peer: (link.client, "down"),
            link.client: (link.peer, "up"),
        }
        open_ends = set(sides)
        with contextlib.suppress(OSError, ValueError):
            while open_ends and not self._stop.is_set():
                ready, _, _ = select.select(list(open_ends), [], [], 0.2)
                for src in ready:
                    dst, direction = sides[src]
                    data = src.recv(_PIECE)
                    if not data:
                        open_ends.discard(src)
                        with contextlib.suppress(OSError):
                            dst.shutdown(socket.SHUT_WR)
                        continue
                    verdict = self._forward(link, direction, data, dst)
                    if verdict == "closed":
                        return
                    if verdict == "stalled":
                        self._stop.wait()
                        return
                    if verdict == "ended":
                        open_ends.discard(src)
        _close(link.client, link.peer)

    def _forward(self, link: _Link, direction: Direction, data: bytes, dst: socket.socket) -> str:
        """Send `data` on, breaking it as the link's fault says; what became of the link."""
        fault = link.fault
        start = link.passed[direction]
        link.passed[direction] += len(data)
        if fault is None or link.fired or fault.direction != direction:
            dst.sendall(data)
            return "open"
        cut = fault.at - start
        if cut >= len(data):
            dst.sendall(data)
            return "open"
        with self._lock:
            if self.fired >= fault.times:
                link.fault = None
                dst.sendall(data)
                return "open"
            self.fired += 1
        cut = max(cut, 0)
        link.fired = True
        if fault.kind == "flip":
            dst.sendall(data[:cut] + bytes([data[cut] ^ 0xFF]) + data[cut + 1 :])
            return "open"
        dst.sendall(data[:cut])
        if fault.kind == "stall":
            return "stalled"
        if fault.kind == "truncate":
            dst.shutdown(socket.SHUT_WR)
            return "ended"
        if fault.kind == "reset":
            for s in (link.client, link.peer):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
        _close(link.client, link.peer)
        return "closed"


def _connect(target: tuple[str, int] | str) -> socket.socket:
    if isinstance(target, str):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(target)
        return sock
    return socket.create_connection(target)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.close()
