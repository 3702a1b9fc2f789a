"""Chunks and metadata objects: round trips, compression, refusal of damaged or swapped bytes."""

import os

import pytest
import zstandard

from diskferry.backup.codec import Codec
from diskferry.backup.errors import CorruptObjectError
from diskferry.backup.keys import new_keys


@pytest.fixture(params=[True, False], ids=["sealed", "plain"])
def codec(request):
    return Codec(new_keys(request.param))


def test_chunk_round_trip_compressible_and_not(codec):
    for plain in (b"a" * 100_000, os.urandom(70_000), b""):
        cid = codec.chunk_id(plain)
        blob = codec.encode_chunk(cid, plain)
        assert codec.decode_chunk(cid, blob, "packs/x") == plain
    text = b"a" * 100_000
    assert len(codec.encode_chunk(codec.chunk_id(text), text)) < 1000
    noise = os.urandom(70_000)
    assert len(codec.encode_chunk(codec.chunk_id(noise), noise)) <= 70_000 + 1 + 28


def test_ids_are_keyed():
    one, two = Codec(new_keys(True)), Codec(new_keys(True))
    assert one.chunk_id(b"same") != two.chunk_id(b"same")
    assert one.chunk_id(b"same") == one.chunk_id(b"same")


def test_flipped_byte_is_corrupt(codec):
    plain = os.urandom(5000)
    cid = codec.chunk_id(plain)
    blob = bytearray(codec.encode_chunk(cid, plain))
    blob[len(blob) // 2] ^= 1
    with pytest.raises(CorruptObjectError, match="packs/aa/p1") as info:
        codec.decode_chunk(cid, bytes(blob), "packs/aa/p1")
    assert info.value.objects == ("packs/aa/p1",)


def test_a_chunk_cannot_stand_in_for_another(codec):
    a, b = os.urandom(100), os.urandom(100)
    blob_a = codec.encode_chunk(codec.chunk_id(a), a)
    with pytest.raises(CorruptObjectError):
        codec.decode_chunk(codec.chunk_id(b), blob_a, "packs/x")


def test_sealed_chunks_hide_their_content():
    codec = Codec(new_keys(True))
    plain = b"secret data " * 1000
    blob = codec.encode_chunk(codec.chunk_id(plain), plain)
    with pytest.raises(zstandard.ZstdError):
        zstandard.ZstdDecompressor().decompress(blob[1:])
    assert b"secret" not in blob


def test_metadata_is_bound_to_its_name(codec):
    blob = codec.encode_meta(b"{}", "snapshots/vm/disk/1")
    assert codec.decode_meta(blob, "snapshots/vm/disk/1") == b"{}"
    if codec.encrypted:
        with pytest.raises(CorruptObjectError, match="snapshots/vm/disk/2"):
            codec.decode_meta(blob, "snapshots/vm/disk/2")
