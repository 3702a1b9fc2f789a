"""Packs `packs/<aa>/<pack-id>`: stored chunks one after another, then a sealed trailer."""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from diskferry.backup.codec import MAX_STORED, Codec
from diskferry.backup.errors import CorruptObjectError
from diskferry.objstore.store import ObjectStore

TARGET_PACK_SIZE = 16 << 20
_MAGIC = b"DFPACK01"
_TAIL = struct.Struct("<I8s")
_ENTRY = struct.Struct("<32sQII")


class PackEntry(NamedTuple):
    """One chunk inside a pack: where its stored bytes are and its plaintext length."""

    chunk_id: bytes
    offset: int
    length: int
    plain_length: int


def new_pack_id() -> str:
    """A random pack id."""
    return os.urandom(16).hex()


def pack_path(pack_id: str) -> str:
    """The object path of a pack."""
    return f"packs/{pack_id[:2]}/{pack_id}"


class PackBuilder:
    """Collects stored chunks for one pack."""

    def __init__(self) -> None:
        self.pack_id = new_pack_id()
        self.entries: list[PackEntry] = []
        self._blobs: list[bytes] = []
        self.size = 0

    def add(self, chunk_id: bytes, blob: bytes, plain_length: int) -> None:
        """Append one stored chunk."""
        self.entries.append(PackEntry(chunk_id, self.size, len(blob), plain_length))
        self._blobs.append(blob)
        self.size += len(blob)

    def build(self, codec: Codec) -> list[bytes]:
        """The pack's bytes in parts, trailer last; the builder lets go of the chunks it held."""
        table = b"".join(_ENTRY.pack(*e) for e in self.entries)
        trailer = codec.encode_meta(table, _trailer_name(self.pack_id))
        blobs, self._blobs = self._blobs, []
        return [*blobs, trailer, _TAIL.pack(len(trailer), _MAGIC)]


def read_trailer(store: ObjectStore, pack_id: str, codec: Codec, size: int) -> list[PackEntry]:
    """The chunks a pack lists in its trailer."""
    path = pack_path(pack_id)
    if size < _TAIL.size:
        raise CorruptObjectError(f"{path} is too short to be a pack", objects=(path,))
    length, magic = _TAIL.unpack(store.get_range(path, size - _TAIL.size, _TAIL.size))
    if magic != _MAGIC or length > size - _TAIL.size:
        raise CorruptObjectError(f"{path} has no valid pack trailer", objects=(path,))
    if length > MAX_STORED:
        raise CorruptObjectError(
            f"{path} has no valid pack trailer: its tail says it is {length} bytes long, more "
            f"than any ({MAX_STORED} bytes at most); it was not read",
            objects=(path,),
        )
    blob = store.get_range(path, size - _TAIL.size - length, length)
    try:
        table = codec.decode_meta(blob, _trailer_name(pack_id))
    except CorruptObjectError:
        raise CorruptObjectError(f"the trailer of {path} is damaged", objects=(path,)) from None
    if len(table) % _ENTRY.size:
        raise CorruptObjectError(f"the trailer of {path} is malformed", objects=(path,))
    return [PackEntry(*fields) for fields in _ENTRY.iter_unpack(table)]


def _trailer_name(pack_id: str) -> str:
    return f"pack-trailer/{pack_id}"
