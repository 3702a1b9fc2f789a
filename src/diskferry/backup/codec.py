"""How bytes are stored: chunk ids, chunks compressed then sealed, metadata objects sealed."""

from __future__ import annotations

import threading

import blake3
import zstandard

from diskferry.backup.config import MAX_CHUNK_SIZE
from diskferry.backup.crypto import NONCE_SIZE, TAG_SIZE, OpenError, open_sealed, seal
from diskferry.backup.errors import CorruptObjectError
from diskferry.backup.keys import Keys

ID_SIZE = 32
# No chunk is larger, and every metadata object is smaller: a stored object that unpacks
# past it is refused before it is unpacked whole, whatever size its header claims.
MAX_PLAIN = MAX_CHUNK_SIZE
# The most bytes an object or chunk is stored as: the compression byte, MAX_PLAIN bytes stored as
# they are (zstd is used only where it is smaller), then a seal's nonce and tag. A reader refuses
# anything longer before it reads it: an object read whole, a chunk, a pack's trailer, each part
# of a manifest.
MAX_STORED = 1 + MAX_PLAIN + NONCE_SIZE + TAG_SIZE
_UNPACK_PIECE = 1 << 20
_STORED = b"\0"
_ZSTD = b"\1"
_LEVEL = 3


class Codec:
    """Turns plaintext into stored bytes and back, with the repository's keys; thread-safe."""

    def __init__(self, keys: Keys) -> None:
        self._keys = keys
        self._local = threading.local()

    @property
    def keys(self) -> Keys:
        """The repository's keys."""
        return self._keys

    @property
    def encrypted(self) -> bool:
        """Whether stored bytes are sealed."""
        return self._keys.data is not None

    def chunk_id(self, plain: bytes | bytearray | memoryview) -> bytes:
        """The keyed BLAKE3 of a chunk's plaintext."""
        return blake3.blake3(plain, key=self._keys.ids).digest()

    def encode_chunk(self, chunk_id: bytes, plain: bytes | bytearray | memoryview) -> bytes:
        """The stored form of a chunk: compressed when that is smaller, then sealed to its id."""
        return self._seal(self._compress(plain), chunk_id)

    def decode_chunk(self, chunk_id: bytes, blob: bytes | memoryview, where: str) -> bytes:
        """The plaintext of a stored chunk, verified against its id; CorruptObjectError if not."""
        try:
            plain = self._decompress(self._open(blob, chunk_id))
        except (OpenError, zstandard.ZstdError, ValueError) as e:
            raise _corrupt(chunk_id, where, str(e)) from None
        if self.chunk_id(plain) != chunk_id:
            raise _corrupt(chunk_id, where, "content does not match its id")
        return plain

    def encode_meta(self, data: bytes, name: str) -> bytes:
        """A metadata object compressed and sealed to its name, so objects cannot be swapped."""
        return self._seal(self._compress(data), name.encode())

    def decode_meta(self, blob: bytes | memoryview, name: str) -> bytes:
        """The content of a metadata object; CorruptObjectError when it does not open."""
        try:
            return self._decompress(self._open(blob, name.encode()))
        except (OpenError, zstandard.ZstdError, ValueError) as e:
            raise CorruptObjectError(
                f"{name} is damaged ({e}): run 'diskferry repo check' to see what it affects",
                objects=(name,),
            ) from None

    def _compressor(self) -> zstandard.ZstdCompressor:
        if not hasattr(self._local, "cctx"):
            self._local.cctx = zstandard.ZstdCompressor(level=_LEVEL)
            self._local.dctx = zstandard.ZstdDecompressor()
        return self._local.cctx

    def _compress(self, plain: bytes | bytearray | memoryview) -> bytes:
        packed = self._compressor().compress(plain)
        if len(packed) < len(plain):
            return _ZSTD + packed
        return _STORED + bytes(plain)

    def _decompress(self, payload: bytes) -> bytes:
        self._compressor()
        if payload[:1] == _STORED:
            return payload[1:]
        if payload[:1] == _ZSTD:
            return _unpack(self._local.dctx, memoryview(payload)[1:])
        raise ValueError("unknown compression")

    def _seal(self, payload: bytes, ad: bytes) -> bytes:
        if self._keys.data is None:
            return payload
        return seal(self._keys.data, payload, ad)

    def _open(self, blob: bytes | memoryview, ad: bytes) -> bytes:
        if self._keys.data is None:
            return bytes(blob)
        return open_sealed(self._keys.data, blob, ad)


def _unpack(dctx: zstandard.ZstdDecompressor, packed: memoryview) -> bytes:
    """The zstd frame `packed` unpacked, at most MAX_PLAIN bytes; ValueError beyond that."""
    pieces = []
    total = 0
    with dctx.stream_reader(packed, read_across_frames=False) as reader:
        while piece := reader.read(_UNPACK_PIECE):
            total += len(piece)
            if total > MAX_PLAIN:
                raise ValueError(f"unpacks to more than {MAX_PLAIN} bytes")
            pieces.append(piece)
    return b"".join(pieces)


def _corrupt(chunk_id: bytes, where: str, why: str) -> CorruptObjectError:
    return CorruptObjectError(
        f"chunk {chunk_id.hex()[:16]} in {where} is damaged ({why}): "
        "run 'diskferry repo check --read-data' to see what it affects",
        objects=(where,),
    )
