"""Manifest entries against a byte-array model: full manifests and incrementals over a parent."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diskferry.backup.entries import Entry, check_cover, coalesce, full_entries, overlay

CHUNKS = [bytes([n]) * 32 for n in range(4)]


def expand(entries, size):
    """What each byte of the disk reads as: (chunk, offset in chunk) or None for zero."""
    model = [None] * size
    for e in entries:
        for i in range(e.length):
            model[e.offset + i] = None if e.chunk is None else (e.chunk, e.chunk_offset + i)
    return model


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
    check_cover(entries, size)
    for a, b in itertools.pairwise(entries):
        same_chunk = a.chunk == b.chunk and (
            a.chunk is None or a.chunk_offset + a.length == b.chunk_offset
        )
        assert not same_chunk, f"{a} and {b} should have been joined"


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(0, 300), st.integers(0, 300))
def test_overlay_matches_the_byte_model(data, old_size, new_size):
    parent = full_entries(data.draw(runs(old_size)), old_size)
    assert_canonical(parent, old_size)
    dirty = data.draw(runs(new_size))
    child = overlay(parent, dirty, new_size)
    assert_canonical(child, new_size)
    model = (expand(parent, old_size) + [None] * new_size)[:new_size]
    for run in dirty:
        model[run.offset : run.end] = expand([run._replace(offset=0)], run.length)
    assert expand(child, new_size) == model


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 300))
def test_full_entries_match_the_runs(data, size):
    given_runs = data.draw(runs(size))
    entries = full_entries(given_runs, size)
    model = [None] * size
    for run in given_runs:
        model[run.offset : run.end] = expand([run._replace(offset=0)], run.length)
    assert expand(entries, size) == model


def test_a_part_of_a_chunk_keeps_its_offset():
    a = CHUNKS[1]
    parent = full_entries([Entry(0, 100, a, 0)], 100)
    child = overlay(parent, [Entry(10, 5, CHUNKS[2], 0)], 100)
    assert child == [
        Entry(0, 10, a, 0),
        Entry(10, 5, CHUNKS[2], 0),
        Entry(15, 85, a, 15),
    ]


def test_neighbours_continuing_one_chunk_are_joined():
    a = CHUNKS[1]
    assert coalesce([Entry(0, 10, a, 0), Entry(10, 5, a, 10), Entry(15, 5, None, 0)]) == [
        Entry(0, 15, a, 0),
        Entry(15, 5, None, 0),
    ]


def test_overlapping_runs_are_refused():
    with pytest.raises(ValueError):
        full_entries([Entry(0, 10, None, 0), Entry(5, 10, None, 0)], 100)
    with pytest.raises(ValueError):
        full_entries([Entry(90, 20, None, 0)], 100)
