"""Index objects `index/<index-id>`: which pack holds each chunk, at what offset and length."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from typing import NamedTuple

from diskferry.backup.codec import MAX_PLAIN, MAX_STORED, Codec
from diskferry.backup.errors import CorruptObjectError

_HEAD = struct.Struct("<I")
_PACK = struct.Struct("<16s")
_ENTRY = struct.Struct("<32sIQII")


class IndexEntry(NamedTuple):
    """Where one chunk is stored."""

    chunk_id: bytes
    pack: str
    offset: int
    length: int
    plain_length: int


def new_index_id() -> str:
    """A random index id."""
    return os.urandom(16).hex()


def index_path(index_id: str) -> str:
    """The object path of an index."""
    return f"index/{index_id}"


def encode_index(index_id: str, entries: Iterable[IndexEntry], codec: Codec) -> bytes:
    """The stored form of an index object."""
    packs: dict[str, int] = {}
    rows = []
    for e in entries:
        number = packs.setdefault(e.pack, len(packs))
        rows.append(_ENTRY.pack(e.chunk_id, number, e.offset, e.length, e.plain_length))
    head = _HEAD.pack(len(packs)) + b"".join(bytes.fromhex(p) for p in packs)
    return codec.encode_meta(head + b"".join(rows), index_path(index_id))


def decode_index(index_id: str, blob: bytes, codec: Codec) -> list[IndexEntry]:
    """The entries of a stored index object; CorruptObjectError when it is malformed, or names a
    chunk longer than any (stored past MAX_STORED bytes, or unpacking past MAX_PLAIN)."""
    data = codec.decode_meta(blob, index_path(index_id))
    try:
        (count,) = _HEAD.unpack_from(data)
        start = _HEAD.size + count * _PACK.size
        if start > len(data) or (len(data) - start) % _ENTRY.size:
            raise struct.error("the lengths do not add up")
        packs = [data[i : i + 16].hex() for i in range(_HEAD.size, start, _PACK.size)]
        entries = [
            IndexEntry(cid, packs[n], off, length, plain)
            for cid, n, off, length, plain in _ENTRY.iter_unpack(memoryview(data)[start:])
        ]
        if any(e.length > MAX_STORED or e.plain_length > MAX_PLAIN for e in entries):
            raise struct.error("a chunk longer than any")
        return entries
    except (struct.error, IndexError):
        path = index_path(index_id)
        raise CorruptObjectError(f"{path} is malformed", objects=(path,)) from None
