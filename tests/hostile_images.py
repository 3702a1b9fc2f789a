"""Hostile images for the import tests: each made from a real one by qemu-img, then bent,
and an HTTP server whose gzip streams never end."""

from __future__ import annotations

import gzip
import http.server
import struct
import subprocess
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

MiB = 1 << 20
# qcow2 header fields (big-endian): virtual size, L1 entries, L1 offset
QCOW2_SIZE = struct.Struct(">Q")
QCOW2_SIZE_AT = 24
QCOW2_L1_SIZE = struct.Struct(">I")
QCOW2_L1_SIZE_AT = 36
# the qcow2 limit on the active L1 table, 32 MiB of 8-byte entries
QCOW2_MAX_L1_ENTRIES = 4 << 20

VMDK_DESCRIPTOR = """{lead}version=1
CID=fffffffe
parentCID=ffffffff
createType="monolithicFlat"

RW 2048 FLAT "/etc/shadow" 0
"""
VMDK_REFUSED = "the image is a VMDK descriptor that keeps its data in other files; refusing it"


def qcow2(directory: Path, size: str = "1M") -> bytearray:
    """The bytes of a fresh qcow2 image of `size` made by qemu-img."""
    path = directory / "fresh.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", str(path), size], check=True, capture_output=True
    )
    data = bytearray(path.read_bytes())
    path.unlink()
    return data


def _written(path: Path, data: bytes, compression: str | None) -> Path:
    if compression == "gzip":
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data, 1)
    path.write_bytes(data)
    return path


def qcow2_of_virtual_size(directory: Path, size: int, compression: str | None) -> Path:
    """A qcow2 image whose header claims a virtual size of `size` bytes."""
    data = qcow2(directory)
    QCOW2_SIZE.pack_into(data, QCOW2_SIZE_AT, size)
    return _written(directory / f"size-{size}.qcow2", data, compression)


def qcow2_with_l1_entries(directory: Path, entries: int, compression: str | None) -> Path:
    """A 1 MiB qcow2 image whose header claims an active L1 table of `entries` entries."""
    data = qcow2(directory)
    QCOW2_L1_SIZE.pack_into(data, QCOW2_L1_SIZE_AT, entries)
    return _written(directory / f"l1-{entries}.qcow2", data, compression)


def vmdk_descriptor(directory: Path, lead: str, compression: str | None) -> Path:
    """A VMDK text descriptor whose one extent is /etc/shadow, after `lead` lines."""
    text = VMDK_DESCRIPTOR.format(lead=lead).encode()
    return _written(directory / "shadow.vmdk", text, compression)


def vmdk_sparse_naming_shadow(directory: Path) -> Path:
    """A monolithicSparse VMDK whose embedded descriptor names /etc/shadow as its extent."""
    path = directory / "sparse.vmdk"
    subprocess.run(
        ["qemu-img", "create", "-f", "vmdk", str(path), "1M"], check=True, capture_output=True
    )
    data = bytearray(path.read_bytes())
    own = b'RW 2048 SPARSE "sparse.vmdk"'
    at = data.index(own)
    shadow = b'RW 2048 FLAT "/etc/shadow" 0'
    data[at : at + len(shadow)] = shadow
    path.write_bytes(data)
    return path


# --- streams that never end ---------------------------------------------------------------

Stream = Callable[[], Iterator[bytes]]


def _deflate_for_ever(head: bytes) -> Iterator[bytes]:
    """One gzip member that never ends: `head`, then random-looking data without end."""
    member = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    yield member.compress(head)
    block = bytes(range(256)) * 4096
    n = 0
    while True:
        n += 1
        yield member.compress(struct.pack(">Q", n) + block)
        yield member.flush(zlib.Z_SYNC_FLUSH)


def _repeating(head: bytes, unit: bytes) -> Stream:
    def stream() -> Iterator[bytes]:
        yield head
        piece = unit * max(1, (64 << 10) // len(unit))
        while True:
            yield piece

    return stream


ENDLESS: dict[str, Stream] = {
    "zero-padding": _repeating(gzip.compress(b"a small disk\n"), bytes(4096)),
    "empty-members": _repeating(b"", gzip.compress(b"")),
    "data": lambda: _deflate_for_ever(b""),
}


@contextmanager
def endless_server() -> Iterator[Callable[[str | Stream], str]]:
    """An HTTP server on 127.0.0.1 streaming bodies without a length that never end.

    The context gives `serve(stream)`: the URL at which `stream()` is sent, for ever,
    until the client hangs up.
    """
    streams: dict[str, Stream] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:
            stream = streams.get(self.path.lstrip("/"))
            if stream is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/gzip")
            self.end_headers()
            try:
                for piece in stream():
                    self.wfile.write(piece)
            except (BrokenPipeError, ConnectionResetError):
                return

        def log_message(self, *args: object) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def serve(stream: str | Stream) -> str:
        name = f"stream-{len(streams)}"
        streams[name] = ENDLESS[stream] if isinstance(stream, str) else stream
        return f"http://127.0.0.1:{server.server_address[1]}/{name}"

    try:
        yield serve
    finally:
        server.shutdown()
        server.server_close()


def qcow2_then_endless(image: bytes) -> Stream:
    """A gzip stream of the qcow2 `image` that goes on with data for ever."""
    return lambda: _deflate_for_ever(image)
