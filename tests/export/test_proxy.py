"""The export proxy: routing and refusals, backend verification, live TLS settings, and load."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from export_support import TOKEN, MiB, curl, make_disk, open_fds, write_routes
from server_support import Running

from diskferry.serving.certs import create_ca
from diskferry.serving.listener import TLS_REFRESH_SECONDS

AUTH = f"x-kubevirt-export-token: {TOKEN}"
PREFIX = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports"


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _code(r: Running, path: str, *args: str) -> int:
    p = curl("-o", "/dev/null", "-w", "%{http_code}", *args, r.url + path, ca=r.ca)
    return int(p.stdout or b"0")


def test_routes_refusals_and_forwarding(
    export: Running, proxy_factory, tmp_path: Path, disk: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    route = {
        "namespace": "default",
        "name": "vm1",
        "url": export.url,
        "caFile": str(export.ca),
        "ready": True,
    }
    write_routes(routes, [route, {**route, "name": "pending", "ready": False}])
    proxy = proxy_factory(routes)
    assert _code(proxy, "/volumes/disk/disk.img", "-H", AUTH) == 400
    assert (
        _code(proxy, "/api/export.kubevirt.io/v2/namespaces/default/virtualmachineexports/vm1/x")
        == 400
    )
    assert _code(proxy, f"{PREFIX}/nope/volumes/disk/disk.img", "-H", AUTH) == 404
    pending = curl("-D", "-", "-o", "/dev/null", "-H", AUTH,
                   proxy.url + f"{PREFIX}/pending/volumes/disk/disk.img", ca=proxy.ca)  # fmt: skip
    assert (
        pending.stdout.startswith(b"HTTP/1.1 503") and b"retry-after: 5" in pending.stdout.lower()
    )
    out = tmp_path / "out.img"
    p = curl(
        "-H", AUTH, "-o", str(out), proxy.url + f"{PREFIX}/vm1/volumes/disk/disk.img", ca=proxy.ca
    )
    assert p.returncode == 0
    assert out.read_bytes() == disk.read_bytes()
    v1 = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/vm1"
    q = f"{v1}/volumes/disk/disk.img?x-kubevirt-export-token={TOKEN}"
    p = curl("-H", "Range: bytes=100-199", "-D", "-", proxy.url + q, ca=proxy.ca)
    head, _, body = p.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 206") and body == disk.read_bytes()[100:200]
    h = curl("-I", "-H", AUTH, proxy.url + f"{PREFIX}/vm1/volumes/disk/disk.img", ca=proxy.ca)
    assert f"content-length: {disk.stat().st_size}".encode() in h.stdout.lower()
    assert b"accept-ranges: bytes" in h.stdout.lower()
    unauthorized = curl(
        "-w", "\n%{http_code}", proxy.url + f"{PREFIX}/vm1/volumes/disk/extents", ca=proxy.ca
    )
    body, _, code = unauthorized.stdout.rpartition(b"\n")
    assert code == b"401" and json.loads(body)["reason"] == "MissingToken"
    spaced = proxy.url + f"{PREFIX}/vm1/volumes/no%20such/disk.img"
    p = curl("-w", "\n%{http_code}", "-H", AUTH, spaced, ca=proxy.ca)
    body, _, code = p.stdout.rpartition(b"\n")
    assert code == b"404" and "no such" in json.loads(body)["message"]
    write_routes(routes, [{**route, "ready": False}])
    assert _code(proxy, f"{PREFIX}/vm1/volumes/disk/extents", "-H", AUTH) == 503
    assert TOKEN not in proxy.log.read_text()


def _answer(r: Running, path: str) -> tuple[int, str, str | None]:
    """The status, the reason and Retry-After of GET `path`."""
    p = curl("-D", "-", "-H", AUTH, r.url + path, ca=r.ca)
    head, _, body = p.stdout.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), json.loads(body)["reason"], fields.get("retry-after")


def test_a_server_that_refuses_where_it_is_named_before_it_listens_is_not_ready_yet(
    proxy_factory, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    with socket.socket() as bound:  # a port that refuses: bound, not listening
        bound.bind(("127.0.0.1", 0))
        nothing = f"https://127.0.0.1:{bound.getsockname()[1]}"
        route = {"namespace": "default", "name": "starting", "url": nothing, "ready": True}
        write_routes(routes, [{**route, "refusedWhileStarting": True}, {**route, "name": "gone"}])
        proxy = proxy_factory(routes)
        path = "/volumes/disk/disk.img"
        assert _answer(proxy, f"{PREFIX}/starting{path}") == (503, "ExportNotReady", "5")
        assert _answer(proxy, f"{PREFIX}/gone{path}") == (502, "BackendUnavailable", None)


def test_backend_from_another_ca_or_name_is_refused(
    export: Running, proxy_factory, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    create_ca(other)
    routes = tmp_path / "routes.yaml"
    write_routes(
        routes,
        [
            {
                "namespace": "default",
                "name": "wrongca",
                "url": export.url,
                "caFile": str(other / "ca.crt"),
            },
            {
                "namespace": "default",
                "name": "wrongname",
                "url": f"https://127.0.0.2:{export.port}",
                "caFile": str(export.ca),
            },
        ],
    )
    proxy = proxy_factory(routes)
    for name in ("wrongca", "wrongname"):
        p = curl(
            "-w",
            "\n%{http_code}",
            "-H",
            AUTH,
            proxy.url + f"{PREFIX}/{name}/volumes/disk/extents",
            ca=proxy.ca,
        )
        body, _, code = p.stdout.rpartition(b"\n")
        assert code == b"502"
        assert json.loads(body)["reason"] in ("BackendCertificateRefused", "BackendUnavailable")
    wrongca = curl("-H", AUTH, proxy.url + f"{PREFIX}/wrongca/volumes/disk/extents", ca=proxy.ca)
    assert json.loads(wrongca.stdout)["reason"] == "BackendCertificateRefused"


def test_tls_minimum_version_changes_without_restart(
    export: Running, proxy_factory, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    write_routes(routes, [])
    settings = tmp_path / "tls.yaml"
    settings.write_text('minVersion: "1.2"\nciphers: "ECDHE+AESGCM"\n')
    proxy = proxy_factory(routes, "--tls-settings", str(settings))
    tls12 = ("--tlsv1.2", "--tls-max", "1.2")
    assert curl("-o", "/dev/null", *tls12, proxy.url + "/x", ca=proxy.ca).returncode == 0
    settings.write_text('minVersion: "1.3"\n')
    refused = curl("-o", "/dev/null", *tls12, proxy.url + "/x", ca=proxy.ca)
    assert refused.returncode == 35, refused.stderr
    assert curl("-o", "/dev/null", proxy.url + "/x", ca=proxy.ca).returncode == 0
    # every process of the proxy looks again within the refresh, a connection or none
    time.sleep(2 * TLS_REFRESH_SECONDS)
    settings.write_text("minVersion: [broken\n")
    for _ in range(8):  # spread over the processes: each keeps 1.3
        assert curl("-o", "/dev/null", *tls12, proxy.url + "/x", ca=proxy.ca).returncode == 35


@pytest.mark.long
def test_load_through_the_proxy_leaks_no_descriptors(
    export_factory, proxy_factory, tmp_path: Path
) -> None:
    small = make_disk(tmp_path / "small.img", 2 * MiB, [(0, 2 * MiB)])
    backend = export_factory({"disk": small}, "--idle-timeout", "2s")
    routes = tmp_path / "routes.yaml"
    write_routes(
        routes,
        [{"namespace": "default", "name": "vm1", "url": backend.url, "caFile": str(backend.ca)}],
    )
    # one process, so that every connection is on the one whose descriptors are counted
    proxy = proxy_factory(
        routes, "--idle-timeout", "2s", "--backend-idle-timeout", "2s", "--processes", "1"
    )
    url = proxy.url + f"{PREFIX}/vm1/volumes/disk/disk.img"
    assert _code(proxy, f"{PREFIX}/vm1/exportready") == 200
    time.sleep(3)
    start = open_fds(proxy.proc.pid)

    config = tmp_path / "parallel.curl"
    config.write_text("".join(f'url = "{url}"\noutput = "/dev/null"\n' for _ in range(200)))
    p = curl(
        "--parallel",
        "--parallel-immediate",
        "--parallel-max",
        "200",
        "-H",
        AUTH,
        "-w",
        "%{http_code} %{size_download}\n",
        "-K",
        str(config),
        ca=proxy.ca,
    )
    lines = p.stdout.decode().split()
    assert p.returncode == 0, p.stderr
    assert lines.count("200") == 200 and lines.count(str(2 * MiB)) == 200
    time.sleep(5)
    assert abs(open_fds(proxy.proc.pid) - start) <= 5
    assert _peak_rss(proxy.proc.pid) <= 256 * MiB

    sequential = tmp_path / "sequential.curl"
    ready = proxy.url + f"{PREFIX}/vm1/volumes/disk/extents"
    sequential.write_text("".join(f'url = "{ready}"\noutput = "/dev/null"\n' for _ in range(2000)))
    p = curl("-H", AUTH, "-w", "%{http_code}\n", "-K", str(sequential), ca=proxy.ca)
    assert p.stdout.decode().split().count("200") == 2000
    assert open_fds(proxy.proc.pid) <= start + 5
