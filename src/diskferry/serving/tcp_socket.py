"""The TCP socket a server listens on, bound before the server starts; with `reuse_port`, each
process of one server binds its own on the same port and the kernel spreads the connections
among them."""

from __future__ import annotations

import socket

from diskferry.serving.errors import ServeError

BACKLOG = 1024


def bind_tcp(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    """A non-blocking socket listening on host:port (0 picks a free port); with `reuse_port`,
    one that other sockets of this user may bind beside (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    return sock
