"""A small NBD server in a thread for the tests: it says what the test wants, right or wrong.

`scripted(data)` sends fixed bytes whatever the client says (for the handshake);
`answering(answer)` does a proper fixed newstyle handshake with structured replies and
then sends, for each request, the bytes `answer(request)` gives (for the replies).
Either ends by closing its side, so that a client waiting for more sees the end.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nbd_helpers import unix_url

from diskferry.nbd import protocol as p

_WAIT = 10.0
Talk = Callable[[socket.socket], None]


@dataclass(frozen=True)
class Request:
    """One request as the server received it."""

    flags: int
    command: int
    cookie: int
    offset: int
    length: int


Answer = Callable[[Request], bytes]


@contextmanager
def hostile_server(path: Path, talk: Talk) -> Iterator[str]:
    """Listen at `path`, run `talk` on the first connection in a thread; the export's URL."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(1)
    listener.settimeout(_WAIT)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(_WAIT)
            try:
                talk(conn)
                _end(conn)
            except OSError:
                pass

    thread = threading.Thread(target=serve, name="hostile-nbd", daemon=True)
    thread.start()
    try:
        yield unix_url(path)
    finally:
        listener.close()
        thread.join(_WAIT)


def scripted(data: bytes) -> Talk:
    """Send `data` whatever the client says."""
    return lambda conn: conn.sendall(data)


def answering(
    answer: Answer,
    *,
    size: int = 1 << 20,
    min_block: int = 1,
    max_block: int = p.DEFAULT_MAX_PAYLOAD,
    contexts: Sequence[str] = ("base:allocation",),
    requests: int | None = None,
) -> Talk:
    """A proper handshake, then `answer` for each request; the end after `requests` of them."""

    def talk(conn: socket.socket) -> None:
        if not _handshake(conn, size, min_block, max_block, contexts):
            return
        answered = 0
        while requests is None or answered < requests:
            header = _recv(conn, p.REQUEST.size)
            if not header:
                return
            _, flags, command, cookie, offset, length = p.REQUEST.unpack(header)
            if command == p.CMD_WRITE:
                _recv(conn, length)
            if command == p.CMD_DISC:
                return
            conn.sendall(answer(Request(flags, command, cookie, offset, length)))
            answered += 1

    return talk


def handshake_bytes(
    size: int = 1 << 20, min_block: int = 1, contexts: Sequence[str] = ("base:allocation",)
) -> bytes:
    """What `answering` sends in its handshake to a client that asks for structured replies
    and `contexts`, then goes to the export: the script a well-behaved server would send."""
    return (
        _greeting()
        + option_reply(p.OPT_STRUCTURED_REPLY, p.REP_ACK)
        + _context_replies(p.OPT_SET_META_CONTEXT, contexts)
        + _go_replies(size, min_block, p.DEFAULT_MAX_PAYLOAD)
    )


def option_reply(option: int, rtype: int, data: bytes = b"") -> bytes:
    """One reply to an option."""
    return p.OPTION_REPLY.pack(p.OPTION_REPLY_MAGIC, option, rtype, len(data)) + data


def chunk(cookie: int, rtype: int, body: bytes = b"", *, done: bool = False) -> bytes:
    """One structured reply chunk."""
    flags = p.REPLY_FLAG_DONE if done else 0
    head = p.STRUCTURED_REPLY_REST.pack(flags, rtype, cookie, len(body))
    return p.MAGIC.pack(p.STRUCTURED_REPLY_MAGIC) + head + body


def data_chunk(cookie: int, offset: int, data: bytes, *, done: bool = False) -> bytes:
    """An OFFSET_DATA chunk: `data` at `offset`."""
    return chunk(cookie, p.REPLY_TYPE_OFFSET_DATA, p.CHUNK_OFFSET.pack(offset) + data, done=done)


def hole_chunk(cookie: int, offset: int, size: int, *, done: bool = False) -> bytes:
    """An OFFSET_HOLE chunk: `size` zeros at `offset`."""
    return chunk(cookie, p.REPLY_TYPE_OFFSET_HOLE, p.HOLE_CHUNK.pack(offset, size), done=done)


def done_chunk(cookie: int) -> bytes:
    """The NONE chunk that ends a reply."""
    return chunk(cookie, p.REPLY_TYPE_NONE, done=True)


def _handshake(
    conn: socket.socket, size: int, min_block: int, max_block: int, contexts: Sequence[str]
) -> bool:
    """The server's side of the handshake; False when the client went away or aborted."""
    conn.sendall(_greeting())
    if not _recv(conn, 4):
        return False
    while True:
        header = _recv(conn, p.OPTION_HEADER.size)
        if not header:
            return False
        _, option, length = p.OPTION_HEADER.unpack(header)
        body = _recv(conn, length) if length else b""
        if option == p.OPT_STRUCTURED_REPLY:
            conn.sendall(option_reply(option, p.REP_ACK))
        elif option in (p.OPT_SET_META_CONTEXT, p.OPT_LIST_META_CONTEXT):
            asked = set(_queries(body))
            conn.sendall(_context_replies(option, [c for c in contexts if c in asked]))
        elif option == p.OPT_GO:
            conn.sendall(_go_replies(size, min_block, max_block))
            return True
        elif option == p.OPT_ABORT:
            conn.sendall(option_reply(option, p.REP_ACK))
            return False
        else:
            conn.sendall(option_reply(option, p.REP_ERR_UNSUP))


def _greeting() -> bytes:
    flags = p.FLAG_FIXED_NEWSTYLE | p.FLAG_NO_ZEROES
    return struct.pack(">QQH", p.NBDMAGIC, p.IHAVEOPT, flags)


def _context_replies(option: int, names: Sequence[str]) -> bytes:
    replies = b"".join(
        option_reply(option, p.REP_META_CONTEXT, struct.pack(">I", i + 1) + name.encode())
        for i, name in enumerate(names)
    )
    return replies + option_reply(option, p.REP_ACK)


def _go_replies(size: int, min_block: int, max_block: int) -> bytes:
    export = struct.pack(">HQH", p.INFO_EXPORT, size, p.TFLAG_SEND_FLUSH)
    blocks = struct.pack(">HIII", p.INFO_BLOCK_SIZE, min_block, 4096, max_block)
    return (
        option_reply(p.OPT_GO, p.REP_INFO, export)
        + option_reply(p.OPT_GO, p.REP_INFO, blocks)
        + option_reply(p.OPT_GO, p.REP_ACK)
    )


def _queries(body: bytes) -> list[str]:
    (name_length,) = struct.unpack_from(">I", body)
    at = 4 + name_length
    (count,) = struct.unpack_from(">I", body, at)
    at += 4
    found = []
    for _ in range(count):
        (length,) = struct.unpack_from(">I", body, at)
        found.append(body[at + 4 : at + 4 + length].decode())
        at += 4 + length
    return found


def _recv(conn: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes, or b"" when the client closed the connection first."""
    buf = bytearray()
    while len(buf) < n:
        got = conn.recv(n - len(buf))
        if not got:
            return b""
        buf += got
    return bytes(buf)


def _end(conn: socket.socket) -> None:
    """Close the sending side, then read what the client still says until it closes too."""
    conn.shutdown(socket.SHUT_WR)
    while conn.recv(1 << 16):
        pass
