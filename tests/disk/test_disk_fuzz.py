"""Hostile bytes for the format probe, the qcow2 and VHD headers and the decompressors."""

from __future__ import annotations

import gzip
import io
import lzma

import pytest
from fuzzing import hostile_inputs, run_target
from hypothesis import given
from hypothesis import strategies as st

from diskferry.disk.decompress import DecompressError, DecompressingReader
from diskferry.disk.formats import FormatError, parse_qcow2_header

TARGETS = ["qcow2_header", "vhd_footer", "probe", "decompress", "xz_blocks"]


@pytest.mark.parametrize("name", TARGETS)
@given(data=st.data())
def test_hostile_bytes_raise_only_typed_errors(name: str, data: st.DataObject) -> None:
    run_target(name, data.draw(hostile_inputs(name), label="input"))


@pytest.mark.parametrize("length", [72, 75, 99, 103])
def test_a_short_version_3_qcow2_header_is_refused(length: int) -> None:
    header = b"QFI\xfb" + (3).to_bytes(4, "big") + bytes(length - 8)
    with pytest.raises(FormatError, match="short version 3 header"):
        parse_qcow2_header(header)


@pytest.mark.parametrize(
    "stream",
    [gzip.compress(bytes(1 << 20))[:-5], lzma.compress(b"x" * 1000)[:-3]],
    ids=["gzip", "xz"],
)
def test_a_stream_cut_short_says_truncated(stream: bytes) -> None:
    reader = DecompressingReader(io.BytesIO(stream), "gzip" if stream[:2] == b"\x1f\x8b" else "xz")
    with pytest.raises(DecompressError, match=r"truncated|corrupt"):
        while reader.read(1 << 16):
            pass
