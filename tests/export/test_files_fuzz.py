"""Hostile bytes for the extents JSON, the proxy's routes file and the TLS settings file."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from fuzzing import hostile_inputs, run_target
from hypothesis import given
from hypothesis import strategies as st

from diskferry.export.errors import DownloadError, RoutesError
from diskferry.export.extent_pages import parse_page
from diskferry.export.routes import load_routes
from diskferry.serving.errors import TlsSetupError
from diskferry.serving.tls import apply_tls_settings, load_tls_settings

TARGETS = ["extents_json", "routes", "tls_settings"]


@pytest.mark.parametrize("name", TARGETS)
@given(data=st.data())
def test_hostile_files_raise_only_typed_errors(name: str, data: st.DataObject) -> None:
    run_target(name, data.draw(hostile_inputs(name), label="input"))


@pytest.mark.parametrize(
    "body",
    [
        b'{"extents": [{"offset": 1e999, "length": 1, "type": "data"}]}',
        b'{"extents": [{"offset": -1, "length": 1, "type": "data"}]}',
        b'{"extents": [{"offset": 0, "length": 1, "type": "hole"}]}',
        b'{"extents": [{"offset": 0, "length": true, "type": "data"}]}',
        b'{"extents": [], "next_offset": "8"}',
        b'{"extents": 5}',
        b"[" * 100_000,
        b"[]",
        b"\xff",
    ],
)
def test_a_malformed_page_of_extents_is_refused(body: bytes) -> None:
    with pytest.raises(DownloadError, match="not in the expected shape"):
        parse_page(body)


def test_settings_files_that_are_not_text_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "file.yaml"
    path.write_bytes(b"minVersion: \xff\xfe\n")
    with pytest.raises(RoutesError, match="cannot read routes"):
        load_routes(path)
    with pytest.raises(TlsSetupError, match="cannot read TLS settings"):
        load_tls_settings(path)


@pytest.mark.parametrize("text", ["[" * 2000, "{a: " * 2000], ids=["lists", "maps"])
def test_settings_files_nested_too_deeply_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(RoutesError, match="cannot read routes"):
        load_routes(path)
    with pytest.raises(TlsSetupError, match="cannot read TLS settings"):
        load_tls_settings(path)


@pytest.mark.parametrize("ciphers", ["ECDHE+AESGCM\\0", "\\ud800"], ids=["nul", "surrogate"])
def test_ciphers_that_are_no_cipher_string_are_refused(tmp_path: Path, ciphers: str) -> None:
    path = tmp_path / "tls.yaml"
    path.write_text(f'ciphers: "{ciphers}"\n')
    with pytest.raises(TlsSetupError, match="no usable cipher"):
        apply_tls_settings(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), load_tls_settings(path))
