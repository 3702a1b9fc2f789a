"""Hostile bytes for pack trailers, index objects, snapshot manifests and stored objects."""

from __future__ import annotations

import struct

import pytest
import zstandard
from fuzz_targets import MANIFEST_PATH, seeds
from fuzzing import hostile_inputs, memory_bound, run_target
from hypothesis import given
from hypothesis import strategies as st

from diskferry.backup.codec import MAX_PLAIN, Codec
from diskferry.backup.errors import CorruptObjectError, RepositoryError
from diskferry.backup.index import decode_index
from diskferry.backup.keys import Keys
from diskferry.backup.packs import pack_path, read_trailer
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import Manifest
from diskferry.objstore.store import ObjectStore

MiB = 1 << 20
CODEC = Codec(Keys(None, bytes(32)))
TARGETS = ["pack_trailer", "index", "manifest"]


@pytest.mark.parametrize("name", TARGETS)
@given(data=st.data())
def test_hostile_objects_raise_only_typed_errors(name: str, data: st.DataObject) -> None:
    run_target(name, data.draw(hostile_inputs(name), label="input"))


def _stored(plain: bytes) -> bytes:
    """`plain` as an unencrypted repository stores it, uncompressed."""
    return b"\0" + plain


def test_a_trailer_of_a_broken_length_is_refused(tmp_path) -> None:
    table = bytes(50)  # not a whole number of 48-byte entries
    trailer = _stored(table)
    blob = trailer + struct.pack("<I8s", len(trailer), b"DFPACK01")
    store = ObjectStore(str(tmp_path))
    store.put(pack_path("ab" * 16), blob)
    with pytest.raises(CorruptObjectError, match="malformed"):
        read_trailer(store, "ab" * 16, CODEC, len(blob))


def test_an_index_naming_four_billion_packs_is_refused_without_allocating() -> None:
    with memory_bound(4 * MiB), pytest.raises(CorruptObjectError, match="malformed"):
        decode_index("cd" * 16, _stored(struct.pack("<I", 0xFFFFFFFF)), CODEC)


def test_a_manifest_page_naming_more_ids_than_it_holds_is_refused() -> None:
    good = seeds()["manifest"][0]
    opened = _open_manifest(good, page=lambda plain: struct.pack("<I", 0xFFFFFFFF) + plain[4:])
    with memory_bound(4 * MiB), pytest.raises(CorruptObjectError, match="more chunk ids"):
        list(opened.entries())


def _open_manifest(stored: bytes, page):
    """The manifest `stored` with every page's plaintext changed by `page`."""

    class Rewriting(Codec):
        def decode_meta(self, blob, name):
            plain = super().decode_meta(blob, name)
            return page(plain) if "#page/" in name else plain

    codec = Rewriting(Keys(None, bytes(32)))
    return Manifest(MANIFEST_PATH, stored, codec, lambda start, n: stored[start : start + n])


@pytest.mark.parametrize("claimed", [1 << 40, 1 << 31])
def test_a_frame_that_claims_a_huge_size_is_refused_without_allocating_it(claimed: int) -> None:
    # a zstd frame header with an 8-byte content size, then one empty last raw block
    frame = struct.pack("<IBQ", 0xFD2FB528, 0b11100000, claimed) + bytes([1, 0, 0])
    with memory_bound(4 * MiB), pytest.raises(CorruptObjectError, match="damaged"):
        CODEC.decode_meta(b"\1" + frame, "index/x")


def test_a_stored_object_that_unpacks_past_the_bound_is_refused() -> None:
    bomb = b"\1" + zstandard.ZstdCompressor().compress(bytes(MAX_PLAIN + MiB))
    with memory_bound(MAX_PLAIN + 8 * MiB), pytest.raises(CorruptObjectError, match="more than"):
        CODEC.decode_meta(bomb, "index/x")


def test_a_chunk_size_past_the_bound_is_refused(tmp_path) -> None:
    with pytest.raises(RepositoryError, match="chunk size"):
        Repository.init(str(tmp_path / "repo"), None, encrypted=False, chunk_size=MAX_PLAIN + 1)
    assert not (tmp_path / "repo" / "config").exists()
