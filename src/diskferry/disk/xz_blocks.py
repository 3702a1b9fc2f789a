"""XzBlockReader: an xz stream whose block headers carry their sizes, decoded a block a thread.

`xz -T` writes such streams. Each block is read whole, wrapped into a one-block .xz stream
and decoded alone, so that liblzma checks its sizes and its check; the blocks are seen
again in the stream's index, which must name the same sizes. A stream whose first block
does not carry its sizes is left to the sequential decoder; a block bigger than the bound
is decoded in place, as it is read. A block without sizes after blocks with them (which
liblzma's encoders never write) is refused.
"""

from __future__ import annotations

import hashlib
import lzma
import struct
import zlib
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from diskferry.disk.decompress import (
    MAX_IDLE_INPUT,
    DecompressError,
    DecompressingReader,
    Readable,
    idle_error,
)

# decoded (and compressed) bytes of the blocks in flight, at most
IN_FLIGHT_BOUND = 160 << 20
# decoded blocks come in pieces of this size, the copy engine's block
_PIECE = 1 << 20
_MAGIC = b"\xfd7zXZ\x00"
_FOOTER_MAGIC = b"YZ"
_HEADER = struct.Struct("<6s2sI")
_FOOTER = struct.Struct("<II2s2s")
_CRC = struct.Struct("<I")
# check id -> its size in bytes; other ids are left to the sequential decoder
_CHECK_SIZES = {0x00: 0, 0x01: 4, 0x04: 8, 0x0A: 32}
_HAS_COMPRESSED = 0x40
_HAS_UNCOMPRESSED = 0x80
_RESERVED_BLOCK_FLAGS = 0x3C


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The multibyte integer at `pos` of `data`, and the position after it."""
    value = 0
    for i in range(9):
        if pos + i >= len(data):
            break
        byte = data[pos + i]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if byte == 0 and i:
                break
            return value, pos + i + 1
    raise DecompressError("the xz stream is corrupt: a bad size field")


@dataclass
class _Block:
    header: bytes
    compressed: int
    uncompressed: int
    check_size: int

    @property
    def unpadded(self) -> int:
        return len(self.header) + self.compressed + self.check_size

    @property
    def total(self) -> int:
        return len(self.header) + -(-self.compressed // 4) * 4 + self.check_size

    @property
    def record(self) -> bytes:
        return _varint(self.unpadded) + _varint(self.uncompressed)


def _parse_block_header(header: bytes, check_size: int) -> _Block | None:
    """The block the header starts, or None when it does not give both sizes."""
    if zlib.crc32(header[:-4]) != _CRC.unpack_from(header, len(header) - 4)[0]:
        raise DecompressError("the xz stream is corrupt: a block header fails its CRC32")
    flags = header[1]
    if flags & _RESERVED_BLOCK_FLAGS or ~flags & (_HAS_COMPRESSED | _HAS_UNCOMPRESSED):
        return None
    compressed, pos = _read_varint(header, 2)
    uncompressed, _ = _read_varint(header, pos)
    return _Block(header, compressed, uncompressed, check_size)


def _one_block_stream(flags: bytes, block: _Block) -> tuple[bytes, bytes]:
    """What goes before and after the bytes of `block` to make it an .xz stream of its own."""
    index = b"\x00\x01" + block.record
    index += bytes(-len(index) % 4)
    index += _CRC.pack(zlib.crc32(index))
    backward = struct.pack("<I", len(index) // 4 - 1) + flags
    footer = _CRC.pack(zlib.crc32(backward)) + backward + _FOOTER_MAGIC
    return _stream_header(flags), index + footer


def _stream_header(flags: bytes) -> bytes:
    return _MAGIC + flags + _CRC.pack(zlib.crc32(flags))


def _decode_block(stream: bytes, size: int) -> list[bytes]:
    """The `size` bytes the one-block stream holds, in pieces; liblzma checks sizes and check."""
    d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    pieces = []
    got = 0
    try:
        while not d.eof and got <= size:
            if d.needs_input and pieces:
                break
            pieces.append(d.decompress(b"" if pieces else stream, _PIECE))
            got += len(pieces[-1])
    except lzma.LZMAError as e:
        raise DecompressError(f"the xz stream is corrupt: {e}") from e
    if not d.eof or got != size:
        raise DecompressError("the xz stream is corrupt: a block does not match its header")
    return pieces


class _Chain:
    """Reads `head`, then `length` bytes of `raw` (all of it where None), then `tail`."""

    def __init__(self, head: bytes, raw: Readable, length: int | None, tail: bytes = b"") -> None:
        self._head, self._raw, self._left, self._tail = head, raw, length, tail

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` bytes; b'' at the end."""
        if self._head:
            out, self._head = self._head[:n], self._head[n:]
            return out
        if self._left is None:
            return self._raw.read(n)
        if self._left:
            out = self._raw.read(min(n, self._left))
            if not out:
                raise DecompressError("the xz stream ends in the middle (truncated)")
            self._left -= len(out)
            return out
        out, self._tail = self._tail[:n], self._tail[n:]
        return out


class XzBlockReader:
    """read(n) gives at most n decompressed bytes of the xz stream `raw`, decoded by `threads`.

    At most `bound` bytes of blocks (compressed and decoded) are in flight.
    """

    def __init__(self, raw: Readable, threads: int, bound: int = IN_FLIGHT_BOUND) -> None:
        self._raw = raw
        self._threads = threads
        self._bound = bound
        self._pool: ThreadPoolExecutor | None = None
        # what comes out next, in order: a block decoding, or a reader of the stream in place
        self._pending: deque[Future[list[bytes]] | Readable] = deque()
        self._weights: deque[int] = deque()
        self._out: deque[bytes] = deque()
        self._next: _Block | None = None
        self._flags: bytes | None = None
        self._blocks = 0
        self._records = hashlib.sha256()
        self._records_size = 0
        self._idle = 0
        self._streams = 0
        self._eof = False

    def read(self, n: int = 1 << 20) -> bytes:
        """Up to `n` decompressed bytes; b'' at the end of the stream."""
        try:
            return self._read(n)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stop the decoding threads (a block being decoded is waited for); the rest are dropped."""
        for item in self._pending:
            if isinstance(item, Future):
                item.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def _read(self, n: int) -> bytes:
        while True:
            if self._out:
                piece = self._out.popleft()
                if len(piece) > n:
                    self._out.appendleft(piece[n:])
                    piece = piece[:n]
                if piece:
                    return piece
                continue
            self._fill()
            if not self._pending:
                if self._eof:
                    self.close()
                    return b""
                continue
            item = self._pending[0]
            if isinstance(item, Future):
                self._pending.popleft()
                self._weights.popleft()
                self._fill()  # the threads go on while this block is read
                self._out.extend(item.result())
                continue
            out = item.read(n)
            if out:
                return out
            self._pending.popleft()
            self._weights.popleft()

    def _fill(self) -> None:
        """Read blocks and hand them out while the threads and the bound allow."""
        while not self._eof and len(self._pending) < self._threads:
            if self._pending and not isinstance(self._pending[-1], Future):
                return  # a block is being read in place
            if self._next is None and not self._parse_next():
                continue
            block = self._next
            assert block is not None
            weight = block.compressed + block.uncompressed
            if self._pending and sum(self._weights) + weight > self._bound:
                return
            self._next = None
            self._take(block, weight)

    def _parse_next(self) -> bool:
        """Read up to the next block header into `_next`; False at a stream's start or end."""
        if self._flags is None:
            self._start_stream()
            return False
        first = self._exact(1)
        if first == b"\x00":
            self._end_stream()
            return False
        header = first + self._exact(first[0] * 4 + 3)
        block = _parse_block_header(header, _CHECK_SIZES[self._flags[1]])
        if block is not None:
            self._next = block
            return True
        if self._blocks:
            raise DecompressError(
                "the xz stream has a block without sizes after blocks with sizes; "
                "decompress it with xz first"
            )
        self._sequential(_stream_header(self._flags) + header)
        return False

    def _start_stream(self) -> None:
        """Read a stream header (or the padding before it, or the end)."""
        head = self._raw_up_to(4)
        while head == bytes(4) and self._streams:
            self._count_idle(4)
            head = self._raw_up_to(4)
        if not head and self._streams:
            self._eof = True
            return
        head += self._raw_up_to(_HEADER.size - len(head))
        if len(head) < _HEADER.size:
            raise DecompressError("the xz stream ends in the middle (truncated)")
        self._count_idle(_HEADER.size)
        magic, flags, crc = _HEADER.unpack(head)
        if magic != _MAGIC or zlib.crc32(flags) != crc or flags[0] or flags[1] not in _CHECK_SIZES:
            self._sequential(head)
            return
        self._flags = flags
        self._streams += 1

    def _end_stream(self) -> None:
        """Read the index (its indicator read) and the footer; both must match the blocks."""
        assert self._flags is not None
        count = _varint(self._blocks)
        size = 1 + len(count) + self._records_size
        size += -size % 4 + 4
        index = b"\x00" + self._exact(size - 1)
        records = index[1 + len(count) : 1 + len(count) + self._records_size]
        padding = index[1 + len(count) + self._records_size : -4]
        if (
            index[1 : 1 + len(count)] != count
            or hashlib.sha256(records).digest() != self._records.digest()
            or padding.strip(b"\x00")
            or zlib.crc32(index[:-4]) != _CRC.unpack_from(index, size - 4)[0]
        ):
            raise DecompressError("the xz stream is corrupt: its index does not match its blocks")
        crc, backward, flags, magic = _FOOTER.unpack(self._exact(_FOOTER.size))
        if (
            magic != _FOOTER_MAGIC
            or flags != self._flags
            or backward != size // 4 - 1
            or crc != zlib.crc32(_FOOTER.pack(0, backward, flags, magic)[4:10])
        ):
            raise DecompressError("the xz stream is corrupt: a bad stream footer")
        # the records follow the blocks' data; what is left is the same for an empty stream
        self._count_idle(size - self._records_size + _FOOTER.size)
        self._flags = None
        self._blocks = self._records_size = 0
        self._records = hashlib.sha256()

    def _take(self, block: _Block, weight: int) -> None:
        """Read the block's bytes and decode them in a thread, or in place if too big."""
        assert self._flags is not None
        self._blocks += 1
        self._records.update(block.record)
        self._records_size += len(block.record)
        if block.uncompressed:
            self._idle = 0
        else:
            self._count_idle(block.total)
        rest = block.total - len(block.header)
        head, tail = _one_block_stream(self._flags, block)
        if weight > self._bound:
            chain = _Chain(head + block.header, self._raw, rest, tail)
            self._pending.append(DecompressingReader(chain, "xz"))
            self._weights.append(0)
            return
        stream = head + block.header + self._exact(rest) + tail
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="xz-block")
        self._pending.append(self._pool.submit(_decode_block, stream, block.uncompressed))
        self._weights.append(weight)

    def _sequential(self, consumed: bytes) -> None:
        """Leave the rest, from the bytes `consumed` of it on, to the sequential decoder."""
        self._pending.append(DecompressingReader(_Chain(consumed, self._raw, None), "xz"))
        self._weights.append(0)
        self._eof = True

    def _count_idle(self, size: int) -> None:
        self._idle += size
        if self._idle > MAX_IDLE_INPUT:
            raise idle_error("xz")

    def _raw_up_to(self, n: int) -> bytes:
        parts = []
        while n:
            more = self._raw.read(n)
            if not more:
                break
            parts.append(more)
            n -= len(more)
        return b"".join(parts)

    def _exact(self, n: int) -> bytes:
        data = self._raw_up_to(n)
        if len(data) < n:
            raise DecompressError("the xz stream ends in the middle (truncated)")
        return data
