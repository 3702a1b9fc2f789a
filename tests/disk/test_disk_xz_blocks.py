"""Multi-block xz decoded a block a thread: exact output, every check, damage refused."""

from __future__ import annotations

import io
import lzma
import random
import struct
import subprocess
import threading
import zlib
from functools import cache

import pytest

from diskferry.disk import xz_blocks
from diskferry.disk.decompress import DecompressError
from diskferry.disk.xz_blocks import XzBlockReader

MiB = 1 << 20
_rng = random.Random(7)
DATA = b"".join(_rng.randbytes(200_000) + bytes(300_000) + b"disk" * 20_000 for _ in range(10))


@cache
def xz(data: bytes, *args: str) -> bytes:
    return subprocess.run(["xz", "-c", *args], input=data, capture_output=True, check=True).stdout


@cache
def multi_block(check: str = "crc64", data: bytes = DATA) -> bytes:
    return xz(data, "-T2", "--block-size=1MiB", f"--check={check}")


def read_all(raw: bytes, threads: int = 2, n: int = MiB, **kwargs: int) -> bytes:
    reader = XzBlockReader(io.BytesIO(raw), threads, **kwargs)
    out = bytearray()
    while chunk := reader.read(n):
        assert len(chunk) <= n
        out += chunk
    return bytes(out)


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def read_varints(data: bytes, count: int) -> list[int]:
    values, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            value, shift = 0, 0
            if len(values) == count:
                break
    return values


def with_index_records(raw: bytes, change) -> bytes:
    """`raw` (one stream of fewer than 128 blocks) with its index records changed by `change`."""
    size = (struct.unpack_from("<I", raw, len(raw) - 8)[0] + 1) * 4
    start = len(raw) - 12 - size
    count = raw[start + 1]
    values = read_varints(raw[start + 2 :], 2 * count)
    records = change(list(zip(values[::2], values[1::2], strict=True)))
    index = b"\x00" + varint(count) + b"".join(varint(u) + varint(s) for u, s in records)
    index += bytes(-len(index) % 4)
    index += struct.pack("<I", zlib.crc32(index))
    assert len(index) == size
    return raw[:start] + index + raw[start + size :]


@pytest.mark.parametrize("check", ["crc32", "crc64", "sha256", "none"])
def test_multi_block_files_decode_exactly(check):
    raw = multi_block(check)
    assert raw.count(b"\xfd7zXZ\x00") == 1 and len(DATA) > 5 * MiB
    assert read_all(raw, n=77_777) == DATA


def test_a_file_of_xz_t0_decodes_exactly():
    assert read_all(xz(DATA, "-T0")) == DATA


@pytest.mark.parametrize(
    "raw", [xz(DATA, "-T1"), lzma.compress(DATA, preset=0)], ids=["xz-T1", "lzma"]
)
def test_single_block_files_without_sizes_decode_sequentially(raw):
    assert read_all(raw) == DATA


def test_concatenated_streams_and_stream_padding():
    parts = [DATA[: 3 * MiB], DATA[3 * MiB : 4 * MiB], DATA[4 * MiB :]]
    raw = multi_block(data=parts[0]) + bytes(8) + multi_block(data=parts[1])
    raw += lzma.compress(parts[2], preset=0)
    assert read_all(raw) == DATA


def test_a_block_bigger_than_the_bound_is_decoded_in_place():
    assert read_all(multi_block(), bound=MiB // 2) == DATA


def test_blocks_are_decoded_at_the_same_time(monkeypatch):
    """Two decodes meet at a barrier: decoded one after the other, they would break it."""
    meet = threading.Barrier(2, timeout=60)
    decode = xz_blocks._decode_block
    calls = 0
    decoding = 0
    most = 0
    lock = threading.Lock()

    def meeting(stream: bytes, size: int) -> bytes:
        nonlocal calls, decoding, most
        with lock:
            calls += 1
            first_two = calls <= 2
            decoding += 1
            most = max(most, decoding)
        try:
            if first_two:
                meet.wait()
            return decode(stream, size)
        finally:
            with lock:
                decoding -= 1

    monkeypatch.setattr(xz_blocks, "_decode_block", meeting)
    assert read_all(multi_block()) == DATA
    assert most == 2


def test_every_thread_decodes_a_block_ahead_while_one_is_read(monkeypatch):
    decode = xz_blocks._decode_block
    started = []
    third = threading.Event()

    def counted(stream: bytes, size: int) -> list[bytes]:
        started.append(size)
        if len(started) == 3:
            third.set()
        return decode(stream, size)

    monkeypatch.setattr(xz_blocks, "_decode_block", counted)
    reader = XzBlockReader(io.BytesIO(multi_block()), 2)
    assert reader.read(10) == DATA[:10]
    assert third.wait(60), "the block after next was not started"
    reader.close()


def test_a_corrupt_block_is_refused():
    raw = bytearray(multi_block("crc32"))
    raw[len(raw) // 2] ^= 0x55
    with pytest.raises(DecompressError, match="the xz stream is corrupt"):
        read_all(bytes(raw))


@pytest.mark.parametrize("fraction", [0.0005, 0.3, 0.7, 0.9999])
def test_a_truncated_file_is_refused(fraction):
    raw = multi_block()
    with pytest.raises(DecompressError, match="ends in the middle"):
        read_all(raw[: int(len(raw) * fraction)])


def test_an_index_that_lies_about_the_blocks_is_refused():
    def swap_sizes(records):
        (u0, s0), (u1, s1) = records[0], records[-1]
        assert s0 != s1 and len(varint(s0)) == len(varint(s1))
        return [(u0, s1), *records[1:-1], (u1, s0)]

    raw = multi_block()
    assert read_all(with_index_records(raw, lambda records: records)) == DATA
    with pytest.raises(DecompressError, match="index does not match its blocks"):
        read_all(with_index_records(raw, swap_sizes))


def with_second_header(raw: bytes, change) -> bytes:
    """`raw` with the sizes (compressed, uncompressed) of its second block header changed by
    `change`; None drops them."""
    compressed, _ = read_varints(raw[14:], 2)
    at = 12 + (raw[12] + 1) * 4 + -(-compressed // 4) * 4 + 8
    header = raw[at : at + (raw[at] + 1) * 4]
    sizes = read_varints(header[2:], 2)
    new = change(*sizes)
    fields = b"".join(varint(v) for v in new) if new else b""
    flags = header[1] & 0x3F | (0xC0 if new else 0)
    filters = header[2 + sum(len(varint(v)) for v in sizes) : -4].rstrip(b"\x00")
    body = bytes([header[0], flags]) + fields + filters
    body += bytes(len(header) - 4 - len(body))
    return raw[:at] + body + struct.pack("<I", zlib.crc32(body)) + raw[at + len(header) :]


def test_a_block_header_that_lies_about_its_size_is_refused():
    raw = multi_block()
    assert read_all(with_second_header(raw, lambda c, u: (c, u))) == DATA
    with pytest.raises(DecompressError, match="the xz stream is corrupt"):
        read_all(with_second_header(raw, lambda c, u: (c, u - 4096)))


def test_a_block_without_sizes_after_blocks_with_sizes_is_refused_in_one_line():
    with pytest.raises(DecompressError, match="a block without sizes after blocks with sizes"):
        read_all(with_second_header(multi_block(), lambda c, u: None))


def test_endless_empty_streams_are_refused():
    with pytest.raises(DecompressError, match="without any data"):
        read_all(lzma.compress(b"") * 200_000)
