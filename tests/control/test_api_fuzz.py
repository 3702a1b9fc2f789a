"""Hostile bytes for the API's body parsers: a JSON value the store takes, or a 4xx Status."""

from __future__ import annotations

import pytest
from fuzzing import hostile_inputs, run_target
from hypothesis import given
from hypothesis import strategies as st

TARGETS = [
    "api_json",
    "api_yaml",
    "api_protobuf",
    "merge_patch",
    "json_patch",
    "strategic_patch",
    "apply_patch",
]
MiB = 1 << 20


@pytest.mark.parametrize("name", TARGETS)
@given(data=st.data())
def test_hostile_bodies_give_a_value_or_a_client_error(name: str, data: st.DataObject) -> None:
    # a JSON patch may copy up to an object's size, parsed: some ten times its 1.5 MiB
    run_target(name, data.draw(hostile_inputs(name), label="body"), bound=32 * MiB)
