"""A client that goes away mid-download costs one log line, not a traceback, on the export
server and on the proxy; an unknown path is a JSON 404."""

from __future__ import annotations

import json
import socket
import ssl
import time
from pathlib import Path

from export_support import TOKEN, MiB, curl, make_disk, write_routes
from server_support import Running

PREFIX = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports/vm1"


def _read_part_and_hang_up(r: Running, path: str) -> None:
    """GET `path`, read the first MiB of the answer, and close the socket."""
    ctx = ssl.create_default_context(cafile=str(r.ca))
    request = f"GET {path} HTTP/1.1\r\nHost: x\r\nx-kubevirt-export-token: {TOKEN}\r\n\r\n"
    with (
        socket.create_connection(("127.0.0.1", r.port)) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request.encode())
        received = 0
        while received < MiB:
            received += len(tls.recv(64 << 10))


def _log_lines_naming(r: Running, path: str) -> list[str]:
    """The log lines that name `path`, once at least one has been written."""
    for _ in range(100):
        lines = [line for line in r.log.read_text().splitlines() if path in line]
        if lines:
            return lines
        time.sleep(0.1)
    raise AssertionError(f"nothing logged for {path}: {r.log.read_text()}")


def test_a_client_that_hangs_up_is_one_line(export_factory, tmp_path: Path) -> None:
    disk = make_disk(tmp_path / "big.img", 64 * MiB, [(0, 64 * MiB)])
    r = export_factory({"disk": disk})
    _read_part_and_hang_up(r, "/volumes/disk/disk.img")
    assert len(_log_lines_naming(r, "/volumes/disk/disk.img")) == 1
    assert curl("-o", "/dev/null", r.url + "/exportready", ca=r.ca).returncode == 0
    r.stop()
    assert "Traceback" not in r.log.read_text()


def test_a_client_that_hangs_up_on_the_proxy_is_one_line(
    export_factory, proxy_factory, tmp_path: Path
) -> None:
    disk = make_disk(tmp_path / "big.img", 64 * MiB, [(0, 64 * MiB)])
    backend = export_factory({"disk": disk})
    routes = tmp_path / "routes.yaml"
    write_routes(
        routes,
        [{"namespace": "default", "name": "vm1", "url": backend.url, "caFile": str(backend.ca)}],
    )
    proxy = proxy_factory(routes)
    _read_part_and_hang_up(proxy, f"{PREFIX}/volumes/disk/disk.img")
    assert len(_log_lines_naming(proxy, f"{PREFIX}/volumes/disk/disk.img")) == 1
    assert len(_log_lines_naming(backend, "/volumes/disk/disk.img")) == 1
    proxy.stop()
    backend.stop()
    assert "Traceback" not in proxy.log.read_text()
    assert "Traceback" not in backend.log.read_text()


def test_an_unknown_path_is_a_json_404(export: Running) -> None:
    auth = f"x-kubevirt-export-token: {TOKEN}"
    p = curl("-H", auth, "-w", "\n%{http_code}", export.url + "/no/such/path", ca=export.ca)
    body, _, code = p.stdout.rpartition(b"\n")
    assert code == b"404"
    problem = json.loads(body)
    assert problem["reason"] == "NotFound" and "/no/such/path" in problem["message"]
