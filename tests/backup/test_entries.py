"""Manifest entries against a byte-array model: full manifests, incrementals, paged manifests."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskferry.backup.codec import Codec
from diskferry.backup.entries import Entry, check_cover, coalesce, full_entries, overlay
from diskferry.backup.errors import CorruptObjectError
from diskferry.backup.keys import new_keys
from diskferry.backup.snapshots import Manifest, ManifestWriter, SnapshotInfo, lead_length

CHUNKS = [bytes([n]) * 32 for n in range(4)]
CODEC = Codec(new_keys(True))


def expand(entries, size):
    """What each byte of the disk reads as: (chunk, offset in chunk) or None for zero."""
    model = [None] * size
    for e in entries:
        for i in range(e.length):
            model[e.offset + i] = None if e.chunk is None else (e.chunk, e.chunk_offset + i)
    return model


class Once:
    """A one-pass iterator over `items` that counts what was taken of it."""

    def __init__(self, items):
        self._items = iter(items)
        self.taken = 0

    def __iter__(self):
        return self

    def __next__(self):
        item = next(self._items)
        self.taken += 1
        return item


@st.composite
def runs(draw, size):
    """Sorted, disjoint runs inside [0, size), each naming a chunk (at any offset) or zeros."""
    cuts = sorted(set(draw(st.lists(st.integers(0, size), max_size=12))))
    out = []
    for start, stop in zip(cuts[::2], cuts[1::2], strict=False):
        if start < stop:
            chunk = draw(st.sampled_from([None, *CHUNKS]))
            offset = 0 if chunk is None else draw(st.integers(0, 500))
            out.append(Entry(start, stop - start, chunk, offset))
    return out


def assert_canonical(entries, size):
    list(check_cover(entries, size))
    for a, b in itertools.pairwise(entries):
        same_chunk = a.chunk == b.chunk and (
            a.chunk is None or a.chunk_offset + a.length == b.chunk_offset
        )
        assert not same_chunk, f"{a} and {b} should have been joined"


def info_of(size):
    return SnapshotInfo(
        id="s1",
        vm="vm",
        disk="d",
        backup="b",
        disk_size=size,
        chunk_size=32,
        type="full",
        started="2026-01-01T00:00:00Z",
        finished="2026-01-01T00:00:00Z",
    )


def stored(entries, size, tmp_path, page_entries):
    """The stored form of a manifest of `entries`, written `page_entries` a page."""
    info = info_of(size)
    with ManifestWriter(info.path, CODEC, tmp_path, page_entries) as writer:
        writer.write(Once(entries))
        with writer.finish(info) as out:
            return info, out.read()


def opened(blob, path):
    """The manifest stored as `blob`, read through ranged reads of it."""
    lead = blob[: lead_length(path, blob, table=True)]
    return Manifest(path, lead, CODEC, lambda start, length: blob[start : start + length])


@settings(max_examples=300)
@given(st.data(), st.integers(0, 300), st.integers(0, 300))
def test_overlay_matches_the_byte_model(data, old_size, new_size):
    parent = list(full_entries(data.draw(runs(old_size)), old_size))
    assert_canonical(parent, old_size)
    dirty = data.draw(runs(new_size))
    base, given_runs = Once(parent), Once(dirty)
    child = list(overlay(base, given_runs, new_size))
    assert_canonical(child, new_size)
    model = (expand(parent, old_size) + [None] * new_size)[:new_size]
    for run in dirty:
        model[run.offset : run.end] = expand([run._replace(offset=0)], run.length)
    assert expand(child, new_size) == model
    # the parent is read no further than the new disk reaches, plus one entry looked ahead
    assert base.taken <= sum(1 for e in parent if e.offset < new_size) + 1


@settings(max_examples=200)
@given(st.data(), st.integers(1, 300))
def test_full_entries_match_the_runs(data, size):
    given_runs = data.draw(runs(size))
    entries = list(full_entries(Once(given_runs), size))
    model = [None] * size
    for run in given_runs:
        model[run.offset : run.end] = expand([run._replace(offset=0)], run.length)
    assert expand(entries, size) == model


@settings(max_examples=100)
@given(st.data(), st.integers(0, 300), st.integers(0, 300), st.integers(1, 5))
def test_an_incremental_over_a_paged_parent_matches_the_byte_model(
    tmp_path_factory, data, old_size, new_size, page_entries
):
    tmp_path = tmp_path_factory.mktemp("pages")
    parent = list(full_entries(data.draw(runs(old_size)), old_size))
    info, blob = stored(parent, old_size, tmp_path, page_entries)
    manifest = opened(blob, info.path)
    assert manifest.info == info
    assert manifest.data_bytes == sum(e.length for e in parent if e.chunk is not None)
    assert list(manifest.entries()) == parent
    dirty = data.draw(runs(new_size))
    child = list(overlay(manifest.entries(), dirty, new_size))
    assert child == list(overlay(parent, dirty, new_size))
    _, child_blob = stored(child, new_size, tmp_path, page_entries)
    assert list(opened(child_blob, info.path).entries()) == child


def test_a_part_of_a_chunk_keeps_its_offset():
    a = CHUNKS[1]
    parent = full_entries([Entry(0, 100, a, 0)], 100)
    child = overlay(parent, [Entry(10, 5, CHUNKS[2], 0)], 100)
    assert list(child) == [
        Entry(0, 10, a, 0),
        Entry(10, 5, CHUNKS[2], 0),
        Entry(15, 85, a, 15),
    ]


def test_neighbours_continuing_one_chunk_are_joined():
    a = CHUNKS[1]
    assert list(coalesce([Entry(0, 10, a, 0), Entry(10, 5, a, 10), Entry(15, 5, None, 0)])) == [
        Entry(0, 15, a, 0),
        Entry(15, 5, None, 0),
    ]


def test_overlapping_runs_are_refused():
    with pytest.raises(ValueError):
        list(full_entries([Entry(0, 10, None, 0), Entry(5, 10, None, 0)], 100))
    with pytest.raises(ValueError):
        list(full_entries([Entry(90, 20, None, 0)], 100))


def test_gaps_and_short_covers_are_refused():
    with pytest.raises(ValueError, match="gap or overlap at offset 10"):
        list(check_cover([Entry(0, 10, None), Entry(11, 89, None)], 100))
    with pytest.raises(ValueError, match="not at the disk size 100"):
        list(check_cover([Entry(0, 10, None)], 100))


def test_damaged_or_moved_pages_are_refused(tmp_path):
    entries = [Entry(i * 10, 10, CHUNKS[i % 4], i) for i in range(9)]
    info, blob = stored(entries, 90, tmp_path, 2)
    lead = lead_length(info.path, blob, table=True)
    flipped = bytearray(blob)
    flipped[lead + 5] ^= 1
    with pytest.raises(CorruptObjectError, match=r"s1#page/0 is damaged"):
        list(opened(bytes(flipped), info.path).entries())
    other = info.model_copy(update={"id": "s2"})
    _, moved = stored(entries, 90, tmp_path, 2)
    with pytest.raises(CorruptObjectError):
        opened(moved, other.path)
    short = [*entries[:4], Entry(40, 50, None)]
    _, gapless = stored(short[:3] + short[4:], 90, tmp_path, 2)
    with pytest.raises(CorruptObjectError, match="gap or overlap at offset 30"):
        list(opened(gapless, info.path).entries())
