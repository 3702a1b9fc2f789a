"""Connecting to an NBD server and the fixed newstyle handshake up to the transmission phase."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from diskferry.nbd import protocol as p
from diskferry.nbd.errors import NbdConnectionError, NbdError
from diskferry.nbd.transport import Transport
from diskferry.nbd.url import NbdUrl

_MAX_OPTION_REPLY = 1 << 20


@dataclass
class ExportInfo:
    """What the handshake learnt of the export: size, flags, block sizes, meta contexts."""

    name: str
    size: int
    flags: int
    structured: bool = False
    min_block: int = 1
    preferred_block: int = 4096
    max_block: int = p.DEFAULT_MAX_PAYLOAD
    contexts: dict[int, str] = field(default_factory=dict)
    available: dict[str, list[str]] = field(default_factory=dict)


def open_socket(url: NbdUrl, timeout: float) -> socket.socket:
    """A connected socket to the server of `url`."""
    try:
        if url.socket is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(url.socket)
            except BaseException:
                sock.close()
                raise
        else:
            sock = socket.create_connection((url.host, url.port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    except OSError as e:
        raise NbdConnectionError(f"cannot connect to NBD server {url}: {e}") from e
    return sock


class Handshake:
    """The option haggling on one connection; its transport becomes TLS after STARTTLS.

    All of it must be done within `timeout` seconds, however the server dribbles its bytes.
    """

    def __init__(self, transport: Transport, url: NbdUrl, timeout: float) -> None:
        self.transport = transport
        self.url = url
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def greet(self) -> None:
        """Read the server's greeting and answer with the client flags."""
        magic, second = struct.unpack(">QQ", self._recv(16))
        if magic != p.NBDMAGIC:
            raise NbdConnectionError(f"{self.url} is not an NBD server (bad greeting)")
        if second != p.IHAVEOPT:
            raise NbdConnectionError(
                f"NBD server {self.url} speaks only the old-style handshake: "
                "run it with newstyle exports"
            )
        (flags,) = struct.unpack(">H", self._recv(2))
        if not flags & p.FLAG_FIXED_NEWSTYLE:
            raise NbdConnectionError(
                f"NBD server {self.url} does not offer fixed newstyle negotiation"
            )
        client = p.FLAG_FIXED_NEWSTYLE | (flags & p.FLAG_NO_ZEROES)
        self._send(struct.pack(">I", client))

    def start_tls(self) -> None:
        """Upgrade the connection to TLS (NBD_OPT_STARTTLS)."""
        from diskferry.nbd.tls import client_context, server_hostname
        from diskferry.nbd.transport import TlsTransport

        context = client_context(self.url)
        self._option(p.OPT_STARTTLS, b"")
        rtype, data = self._reply(p.OPT_STARTTLS)
        if rtype != p.REP_ACK:
            raise self._refused("TLS", rtype, data)
        try:
            self.transport = TlsTransport(self.transport.sock, context, server_hostname(self.url))
        except OSError as e:
            raise NbdConnectionError(f"TLS with NBD server {self.url} failed: {e}") from e

    def structured_replies(self) -> bool:
        """Ask for structured replies; whether the server agreed."""
        self._option(p.OPT_STRUCTURED_REPLY, b"")
        rtype, data = self._reply(p.OPT_STRUCTURED_REPLY)
        if rtype == p.REP_ACK:
            return True
        if rtype == p.REP_ERR_UNSUP:
            return False
        raise self._refused("structured replies", rtype, data)

    def meta_contexts(
        self, option: int, export: str, queries: Sequence[str]
    ) -> list[tuple[int, str]]:
        """Set (or list) meta contexts of `export`; the server's (id, name) answers.

        Listed contexts all carry id 0; only set ones have ids that block status uses.
        """
        body = _string32(export) + struct.pack(">I", len(queries))
        body += b"".join(_string32(q) for q in queries)
        self._option(option, body)
        found: list[tuple[int, str]] = []
        while True:
            rtype, data = self._reply(option)
            if rtype == p.REP_ACK:
                return found
            if rtype == p.REP_META_CONTEXT and len(data) >= 4:
                (context_id,) = struct.unpack_from(">I", data)
                found.append((context_id, data[4:].decode("utf-8", "replace")))
            elif rtype == p.REP_ERR_UNSUP:
                return []
            elif rtype & p.REP_FLAG_ERROR:
                raise self._refused("meta contexts", rtype, data)

    def go(self, export: str) -> ExportInfo:
        """Choose the export with NBD_OPT_GO, asking for its block sizes."""
        body = _string32(export) + struct.pack(">HH", 1, p.INFO_BLOCK_SIZE)
        self._option(p.OPT_GO, body)
        info = ExportInfo(name=export, size=-1, flags=0)
        while True:
            rtype, data = self._reply(p.OPT_GO)
            if rtype == p.REP_ACK:
                break
            if rtype == p.REP_INFO and len(data) >= 2:
                _read_info(info, data)
            elif rtype & p.REP_FLAG_ERROR:
                raise self._refused(f"export {export!r}", rtype, data)
        if info.size < 0:
            raise NbdConnectionError(f"NBD server {self.url} did not tell the export's size")
        return info

    def abort(self) -> None:
        """End the handshake politely without choosing an export."""
        with contextlib.suppress(NbdConnectionError):
            self._option(p.OPT_ABORT, b"")

    def _refused(self, what: str, rtype: int, data: bytes) -> NbdError:
        why = p.REP_ERRORS.get(rtype, f"error {rtype & ~p.REP_FLAG_ERROR}")
        said = " ".join(data.decode("utf-8", "replace").split())
        text = f"NBD server {self.url} refused {what}: {why}" + (f" ({said})" if said else "")
        if rtype == p.REP_ERR_TLS_REQD:
            text += "; connect with nbds:// or nbds+unix://"
        elif rtype == p.REP_ERR_UNKNOWN:
            text += "; check the export name in the URL"
        return NbdError(text)

    def _option(self, option: int, data: bytes) -> None:
        self._send(p.OPTION_HEADER.pack(p.IHAVEOPT, option, len(data)) + data)

    def _reply(self, option: int) -> tuple[int, bytes]:
        magic, replied, rtype, length = p.OPTION_REPLY.unpack(self._recv(p.OPTION_REPLY.size))
        if magic != p.OPTION_REPLY_MAGIC or replied != option or length > _MAX_OPTION_REPLY:
            raise NbdConnectionError(f"NBD server {self.url} sent a malformed option reply")
        return rtype, self._recv(length)

    def _late(self) -> NbdConnectionError:
        return NbdConnectionError(
            f"NBD handshake with {self.url} did not finish in {self.timeout:g} s: "
            "check that the server is an NBD server and not overloaded"
        )

    def _send(self, data: bytes) -> None:
        try:
            self.transport.sendall(data)
        except OSError as e:
            raise NbdConnectionError(f"NBD handshake with {self.url} failed: {e}") from e

    def _recv(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        done = 0
        while done < n:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._late()
            try:
                self.transport.settimeout(left)
                got = self.transport.recv_into(view[done:])
            except TimeoutError as e:
                raise self._late() from e
            except OSError as e:
                raise NbdConnectionError(f"NBD handshake with {self.url} failed: {e}") from e
            if got == 0:
                raise NbdConnectionError(
                    f"NBD server {self.url} closed the connection during the handshake"
                )
            done += got
        return bytes(buf)


def _start(url: NbdUrl, timeout: float) -> Handshake:
    """Connect, greet and (for nbds URLs) start TLS."""
    shake = Handshake(Transport(open_socket(url, timeout)), url, timeout)
    try:
        shake.greet()
        if url.tls:
            shake.start_tls()
    except BaseException:
        shake.transport.close()
        raise
    return shake


def negotiate(
    url: NbdUrl, contexts: Sequence[str] = (), timeout: float = 30.0
) -> tuple[Transport, ExportInfo]:
    """Connect and negotiate up to the transmission phase, asking for `contexts`.

    A context the server does not grant is listed in `available` with what the server
    offers in its namespace, so that the caller can say what to ask for instead.
    """
    shake = _start(url, timeout)
    try:
        structured = shake.structured_replies()
        granted: dict[int, str] = {}
        available: dict[str, list[str]] = {}
        if structured and contexts:
            granted = dict(shake.meta_contexts(p.OPT_SET_META_CONTEXT, url.export, contexts))
            for missing in sorted(set(contexts) - set(granted.values())):
                namespace = missing[: missing.rfind(":") + 1]
                listed = shake.meta_contexts(p.OPT_LIST_META_CONTEXT, url.export, [namespace])
                available[missing] = sorted(name for _, name in listed)
        info = shake.go(url.export)
        _check_sizes(url, info)
    except BaseException:
        shake.transport.close()
        raise
    info.structured = structured
    info.contexts = granted
    info.available = available
    shake.transport.settimeout(None)
    return shake.transport, info


def list_meta_contexts(
    url: NbdUrl, queries: Sequence[str] = (), timeout: float = 30.0
) -> list[str]:
    """The meta contexts of the export matching `queries` (all of them when none are given)."""
    shake = _start(url, timeout)
    try:
        if not shake.structured_replies():
            return []
        listed = shake.meta_contexts(p.OPT_LIST_META_CONTEXT, url.export, queries)
        shake.abort()
        return sorted(name for _, name in listed)
    finally:
        shake.transport.close()


def _check_sizes(url: NbdUrl, info: ExportInfo) -> None:
    """Refuse an export size or block sizes that no real export has."""
    if info.size > p.MAX_EXPORT_SIZE:
        raise NbdConnectionError(f"NBD server {url} announced an impossible size {info.size}")
    sizes = (info.min_block, info.preferred_block, info.max_block)
    if (
        info.min_block < 1
        or info.min_block > p.MAX_MIN_BLOCK
        or info.min_block & (info.min_block - 1)
        or info.max_block < info.min_block
    ):
        raise NbdConnectionError(f"NBD server {url} announced impossible block sizes {sizes}")


def _read_info(info: ExportInfo, data: bytes) -> None:
    (kind,) = struct.unpack_from(">H", data)
    if kind == p.INFO_EXPORT and len(data) >= 12:
        info.size, info.flags = struct.unpack_from(">QH", data, 2)
    elif kind == p.INFO_BLOCK_SIZE and len(data) >= 14:
        info.min_block, info.preferred_block, info.max_block = struct.unpack_from(">III", data, 2)


def _string32(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">I", len(raw)) + raw
