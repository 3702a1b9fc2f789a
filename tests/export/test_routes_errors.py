"""The proxy's routes file: a missing file or a bad one stops the proxy at start with each
fault named by field and line; a path it does not route names the versions it serves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from export_support import curl, write_routes

from diskferry.serving.certs import create_ca

BAD_ROUTES = """\
exports:
  - namespace: default
    name: vm1
  - namespace: default
    name: vm2
    url: https://127.0.0.1:1
    cafile: /ca.crt
"""


def _proxy_fails(routes: Path, tmp_path: Path) -> str:
    """The error line of a proxy that must not start."""
    create_ca(tmp_path / "ca")
    args = ["proxy", "serve", "--routes", str(routes), "--cert-dir", str(tmp_path / "ca")]
    args += ["--address", "127.0.0.1", "--port", "0"]
    p = subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 1, p.stderr
    assert p.stdout == ""
    [line] = p.stderr.splitlines()
    return line


def test_a_missing_routes_file_fails_at_start(tmp_path: Path) -> None:
    line = _proxy_fails(tmp_path / "nosuch.yaml", tmp_path)
    assert line == f"diskferry: error: the routes file {tmp_path / 'nosuch.yaml'} does not exist"


def test_a_bad_routes_file_names_each_field_and_line(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text(BAD_ROUTES)
    line = _proxy_fails(routes, tmp_path)
    assert "validation error" not in line
    assert "exports[0].url: Field required (line 2)" in line
    assert "exports[1].cafile: Extra inputs are not permitted (line 7)" in line


def test_an_unrouted_path_names_the_versions_served(proxy_factory, tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    write_routes(routes, [])
    proxy = proxy_factory(routes)
    path = "/api/export.kubevirt.io/v2/namespaces/default/virtualmachineexports/vm1/x"
    p = curl("-w", "%{http_code}", proxy.url + path, ca=proxy.ca)
    body, code = p.stdout[:-3], p.stdout[-3:]
    assert code == b"400"
    answer = json.loads(body)
    assert answer["reason"] == "BadPath"
    assert "v1, v1beta1" in answer["message"]
