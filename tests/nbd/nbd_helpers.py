"""Helpers of the NBD tests: images, URLs, nbdinfo maps, free ports."""

from __future__ import annotations

import json
import random
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from diskferry.disk.extent import Extent, merge_adjacent


@dataclass
class Server:
    """A running NBD server process and the URL of its export."""

    proc: subprocess.Popen[bytes]
    url: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def unix_url(sock: Path, export: str = "") -> str:
    """The nbd+unix URL of `export` on the server listening at `sock`."""
    return f"nbd+unix:///{export}?socket={sock}"


def make_image(path: Path, size: int, pieces: dict[int, bytes]) -> Path:
    """A sparse raw file of `size` bytes with `pieces` written at their offsets."""
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, data in pieces.items():
            f.seek(offset)
            f.write(data)
    return path


def nbdinfo_map(url: str, context: str = "base:allocation") -> list[dict[str, int]]:
    """`nbdinfo --map=CONTEXT --json` of the export at `url`."""
    out = subprocess.run(
        ["nbdinfo", f"--map={context}", "--json", url], check=True, capture_output=True
    ).stdout
    return json.loads(out)


def as_extents(entries: list[dict[str, int]], dirty: bool) -> list[Extent]:
    """nbdinfo map entries as merged extents: zero and hole from their bits, or dirty from bit 0."""
    extents = (
        Extent(e["offset"], e["length"], zero=False, dirty=bool(e["type"] & 1))
        if dirty
        else Extent(e["offset"], e["length"], zero=bool(e["type"] & 2), hole=bool(e["type"] & 1))
        for e in entries
    )
    return list(merge_adjacent(extents))


def file_bytes(path: Path, offset: int = 0, length: int | None = None) -> bytes:
    """Bytes of a file, read directly."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(-1 if length is None else length)


def qemu_io(image: Path, fmt: str, *commands: str) -> None:
    """Run qemu-io commands on an image (the bitmaps of a qcow2 mark what they write)."""
    argv = ["qemu-io", "-f", fmt]
    for command in commands:
        argv += ["-c", command]
    subprocess.run([*argv, str(image)], check=True, capture_output=True)


def qcow2_with_bitmap(path: Path, size: str, bitmap: str, *writes: str) -> Path:
    """A qcow2 with an enabled persistent bitmap and `writes` (qemu-io commands) made after it."""
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", str(path), size], check=True, capture_output=True
    )
    qemu_io(path, "qcow2", "write -P 0x11 0 256k")
    subprocess.run(["qemu-img", "bitmap", "--add", "--enable", str(path), bitmap], check=True)
    if writes:
        qemu_io(path, "qcow2", *writes)
    return path


def pattern(n: int, seed: int = 7) -> bytes:
    """Deterministic pseudo-random bytes."""
    return random.Random(seed).randbytes(n)
