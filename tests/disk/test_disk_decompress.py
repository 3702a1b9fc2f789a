"""Streaming decompression: every kind, concatenated members, truncation and corruption."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import random

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from diskferry.disk.decompress import DecompressError, DecompressingReader

KINDS = ("gzip", "xz", "zstd", "bzip2")
DATA = random.Random(5).randbytes(300_000) + bytes(2_000_000) + b"tail" * 1000


def compress(kind: str, data: bytes) -> bytes:
    if kind == "gzip":
        return gzip.compress(data, 1)
    if kind == "xz":
        return lzma.compress(data, preset=0)
    if kind == "bzip2":
        return bz2.compress(data, 1)
    return zstandard.ZstdCompressor(write_checksum=True).compress(data)


def zstd_streamed(data: bytes) -> bytes:
    """A zstd frame without a content size, as `zstd` writes from a pipe."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
        for pos in range(0, len(data), 100_000):
            w.write(data[pos : pos + 100_000])
    return out.getvalue()


def read_all(raw: bytes, kind: str, n: int = 1 << 20) -> bytes:
    reader = DecompressingReader(io.BytesIO(raw), kind)
    out = bytearray()
    while chunk := reader.read(n):
        assert len(chunk) <= n
        out += chunk
    return bytes(out)


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip(kind):
    assert read_all(compress(kind, DATA), kind) == DATA


@pytest.mark.parametrize("kind", KINDS)
def test_concatenated_members_are_read_on(kind):
    parts = [DATA[:1000], DATA[1000:500_000], DATA[500_000:]]
    joined = b"".join(compress(kind, p) for p in parts)
    assert read_all(joined, kind, 77_777) == DATA


def test_zero_padding_after_gzip_members():
    padded = compress("gzip", DATA[:1000]) + bytes(300_000) + compress("gzip", DATA[1000:])
    assert read_all(padded + bytes(512), "gzip") == DATA
    assert gzip.decompress(padded) == DATA


def test_zstd_without_content_size_and_skippable_frames():
    skippable = (0x184D2A5E).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"
    raw = zstd_streamed(DATA[:400_000]) + skippable + zstd_streamed(DATA[400_000:])
    assert read_all(raw, "zstd") == DATA


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fraction", [0.001, 0.3, 0.9, 0.999])
def test_truncation_is_detected(kind, fraction):
    raw = compress(kind, DATA)
    cut = max(1, int(len(raw) * fraction))
    with pytest.raises(DecompressError, match=f"the {kind} stream ends in the middle"):
        read_all(raw[:cut], kind)


def test_truncated_streamed_zstd_is_detected():
    raw = zstd_streamed(DATA)
    with pytest.raises(DecompressError, match="zstd stream ends in the middle"):
        read_all(raw[: len(raw) - 3], "zstd")


@settings(max_examples=30)
@given(kind=st.sampled_from(KINDS), cut=st.floats(0.0, 1.0, exclude_max=True))
def test_any_cut_of_two_members_is_detected_unless_between_them(kind, cut):
    first, second = compress(kind, DATA[:200_000]), compress(kind, DATA[200_000:400_000])
    raw = first + second
    at = int(len(raw) * cut)
    if at in (0, len(first)):
        assert read_all(raw[:at], kind) == DATA[: 200_000 if at else 0]
        return
    with pytest.raises(DecompressError):
        read_all(raw[:at], kind)


@pytest.mark.parametrize("kind", KINDS)
def test_corruption_is_detected(kind):
    raw = bytearray(compress(kind, DATA))
    for i in range(20, 220):
        raw[i] ^= 0xA5
    with pytest.raises(DecompressError, match=f"the {kind} stream"):
        read_all(bytes(raw), kind)


class Endless:
    """A stream that repeats `unit` whole after `head`, and fails the test past `bound` bytes."""

    def __init__(self, head: bytes, unit: bytes, bound: int = 64 << 20) -> None:
        self.head, self.unit, self.left = head, unit, bound

    def read(self, n: int = 1 << 20) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            return out
        out = self.unit * max(1, n // len(self.unit))
        self.left -= len(out)
        assert self.left > 0, "read on and on without refusing the stream"
        return out


SKIPPABLE = b"\x50\x2a\x4d\x18" + (1 << 16).to_bytes(4, "little") + bytes(1 << 16)


@pytest.mark.parametrize(
    ("kind", "head", "unit"),
    [
        ("gzip", gzip.compress(b"some data"), b"\0" * 4096),
        ("gzip", b"", gzip.compress(b"")),
        ("bzip2", b"", bz2.compress(b"")),
        ("zstd", b"", zstandard.ZstdCompressor().compress(b"")),
        ("zstd", b"", SKIPPABLE),
    ],
    ids=["gzip-padding", "gzip-empty-members", "bzip2-empty-streams", "zstd-empty", "zstd-skip"],
)
def test_a_stream_that_never_ends_without_data_is_refused(kind, head, unit):
    reader = DecompressingReader(Endless(head, unit), kind)
    with pytest.raises(DecompressError, match=f"the {kind} stream goes on for more than 4 MiB"):
        while reader.read(1 << 16):
            pass
