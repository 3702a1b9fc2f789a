"""Hostile inputs for the fuzz targets under hypothesis: random bytes and mutated seeds."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

import fuzz_targets
from hypothesis import strategies as st

MiB = 1 << 20


@contextmanager
def memory_bound(bound: int = 16 * MiB) -> Iterator[None]:
    """Fail when the Python heap grows by `bound` or more inside the block."""
    tracemalloc.start()
    try:
        yield
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < bound, f"{peak} bytes allocated"


def _mutate(seed: bytes, changes: list[tuple[int, int]], cut: int, tail: bytes) -> bytes:
    data = bytearray(seed)
    for at, value in changes:
        if data:
            data[at % len(data)] = value
    return bytes(data[: cut % (len(data) + 1)] + tail) if cut >= 0 else bytes(data + tail)


def hostile_inputs(name: str, max_size: int = 4096) -> st.SearchStrategy[bytes]:
    """Inputs for the target `name`: random bytes, or one of its seeds changed a little."""
    seeds = fuzz_targets.seeds()[name]
    mutated = st.builds(
        _mutate,
        st.sampled_from(seeds),
        st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=6),
        st.one_of(st.just(-1), st.integers(0, 1 << 20)),
        st.binary(max_size=16),
    )
    return st.one_of(st.binary(max_size=max_size), mutated)


def run_target(name: str, data: bytes, bound: int = 16 * MiB) -> None:
    """Run the target `name` on `data` within a memory bound; only typed errors pass it."""
    with memory_bound(bound):
        fuzz_targets.TARGETS[name](data)
