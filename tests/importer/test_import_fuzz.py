"""Hostile bytes for `diskferry info`: its own probe, then qemu-img under the untrusted limits."""

from __future__ import annotations

from fuzzing import hostile_inputs, run_target
from hypothesis import given, settings


@settings(max_examples=40)
@given(hostile_inputs("info"))
def test_info_of_hostile_bytes_raises_only_typed_errors(data: bytes) -> None:
    run_target("info", data)
