"""The hop from the proxy to an export server on the same host over the server's Unix socket:
downloads byte-exact, the token still checked by the server, the socket private while it
serves and gone after, a stale one replaced; a route without a socket still goes over TLS."""

from __future__ import annotations

import asyncio
import json
import socket
import stat
from pathlib import Path

import aiohttp
import pytest
from export_support import TOKEN, MiB, curl, make_disk, write_routes
from server_support import Running

from diskferry.export.backends import Backends, PoolSettings
from diskferry.export.download import DownloadRequest, download
from diskferry.serving.certs import create_ca
from diskferry.serving.errors import ServeError
from diskferry.serving.unix_socket import bind_unix

AUTH = f"x-kubevirt-export-token: {TOKEN}"
PREFIX = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports/vm1"


def _closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answer(proxy: Running, path: str, *args: str) -> tuple[int, bytes]:
    p = curl("-w", "\n%{http_code}", *args, proxy.url + PREFIX + path, ca=proxy.ca)
    body, _, code = p.stdout.rpartition(b"\n")
    return int(code or b"0"), body


def _stale_socket(path: Path) -> None:
    """A socket file that nothing accepts on, as a killed server leaves it."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


def test_downloads_over_the_unix_hop_are_exact_and_the_server_checks_the_token(
    export_factory, proxy_factory, tmp_path: Path, disk: Path
) -> None:
    sock = tmp_path / "run" / "vm1.sock"
    export = export_factory({"disk": disk}, "--unix-socket", str(sock))
    routes = tmp_path / "routes.yaml"
    # the URL leads nowhere: only the socket can answer
    url = f"https://127.0.0.1:{_closed_port()}"
    write_routes(
        routes, [{"namespace": "default", "name": "vm1", "url": url, "unixSocket": str(sock)}]
    )
    proxy = proxy_factory(routes)
    data = disk.read_bytes()
    out = tmp_path / "out.img"
    p = curl("-H", AUTH, "-o", str(out), proxy.url + PREFIX + "/volumes/disk/disk.img", ca=proxy.ca)
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == data
    ranged = curl(
        "-H",
        AUTH,
        "-H",
        "Range: bytes=1048570-1048699",
        proxy.url + PREFIX + "/volumes/disk/disk.img",
        ca=proxy.ca,
    )
    assert ranged.stdout == data[1048570:1048700]
    code, body = _answer(proxy, "/volumes/disk/extents", "-H", "x-kubevirt-export-token: wrong")
    assert code == 401 and json.loads(body)["reason"] == "BadToken"
    code, body = _answer(proxy, "/volumes/disk/extents")
    assert code == 401 and json.loads(body)["reason"] == "MissingToken"
    assert TOKEN not in export.log.read_text() + proxy.log.read_text()


def test_the_socket_is_owner_only_while_serving_and_gone_after_stop(
    export_factory, tmp_path: Path, disk: Path
) -> None:
    sock = tmp_path / "run" / "vm1.sock"
    export = export_factory({"disk": disk}, "--unix-socket", str(sock))
    found = sock.lstat()
    assert stat.S_ISSOCK(found.st_mode)
    assert stat.S_IMODE(found.st_mode) == 0o600
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    direct = curl("--unix-socket", str(sock), "-H", AUTH, "http://localhost/volumes/disk/disk.img")
    assert direct.stdout == disk.read_bytes()
    assert export.stop() == 0
    assert not sock.exists()
    assert list(sock.parent.iterdir()) == []


def test_a_stale_socket_is_replaced_and_a_live_one_is_not_taken(
    export_factory, tmp_path: Path, disk: Path
) -> None:
    sock = tmp_path / "vm1.sock"
    _stale_socket(sock)
    export_factory({"disk": disk}, "--unix-socket", str(sock))
    direct = curl("--unix-socket", str(sock), "-H", AUTH, "http://localhost/exportready")
    assert direct.stdout == b"ready\n"
    with pytest.raises(AssertionError, match="another server listens"):
        export_factory({"disk": disk}, "--unix-socket", str(sock))
    assert curl("--unix-socket", str(sock), "http://localhost/exportready").stdout == b"ready\n"


def test_a_path_that_is_not_a_socket_is_refused(tmp_path: Path) -> None:
    taken = tmp_path / "file"
    taken.write_text("keep me")
    with pytest.raises(ServeError, match="not a socket"):
        bind_unix(taken)
    assert taken.read_text() == "keep me"
    with pytest.raises(ServeError, match="too long"):
        bind_unix(tmp_path / ("x" * 120))


def test_removing_leaves_a_socket_that_replaced_this_one(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    first = bind_unix(path)
    first.sock.close()
    second = bind_unix(path)
    first.remove()
    assert path.exists()
    second.remove()
    second.sock.close()
    assert not path.exists()


def test_a_route_without_a_socket_goes_over_tls(
    export_factory, proxy_factory, tmp_path: Path, disk: Path
) -> None:
    sock = tmp_path / "vm1.sock"
    export = export_factory({"disk": disk}, "--unix-socket", str(sock))
    other = tmp_path / "other-ca"
    create_ca(other)
    routes = tmp_path / "routes.yaml"
    route = {"namespace": "default", "name": "vm1", "url": export.url, "caFile": str(export.ca)}
    write_routes(routes, [route, {**route, "name": "wrongca", "caFile": str(other / "ca.crt")}])
    proxy = proxy_factory(routes)
    p = curl("-H", AUTH, proxy.url + PREFIX + "/volumes/disk/disk.img", ca=proxy.ca)
    assert p.stdout == disk.read_bytes()
    # the other CA does not verify the server: the hop is TLS, though the server has a socket
    wrong = PREFIX.replace("/vm1", "/wrongca") + "/volumes/disk/extents"
    refused = curl("-H", AUTH, proxy.url + wrong, ca=proxy.ca)
    assert json.loads(refused.stdout)["reason"] == "BackendCertificateRefused"


def test_a_route_to_a_socket_nobody_serves_is_a_bad_gateway(proxy_factory, tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    url = f"https://127.0.0.1:{_closed_port()}"
    missing = str(tmp_path / "none.sock")
    write_routes(
        routes, [{"namespace": "default", "name": "vm1", "url": url, "unixSocket": missing}]
    )
    proxy = proxy_factory(routes)
    code, body = _answer(proxy, "/volumes/disk/extents", "-H", AUTH)
    assert code == 502 and json.loads(body)["reason"] == "BackendUnavailable"


def test_one_pool_per_socket_is_kept_and_closed_once_no_route_names_it() -> None:
    async def go() -> None:
        backends = Backends(PoolSettings(per_backend=3), 64 << 10)
        await backends.open()
        named = {"/run/a.sock", "/run/b.sock"}
        async with backends.session("/run/a.sock", lambda: named) as a:
            async with backends.session("/run/a.sock", lambda: named) as again:
                assert again is a
            assert a.connector is not None and a.connector.limit == 3
        async with backends.session(None, lambda: named) as tcp:
            assert tcp is not a and isinstance(tcp.connector, aiohttp.TCPConnector)
        named.discard("/run/a.sock")
        async with backends.session("/run/b.sock", lambda: named) as b:
            assert b is not a and a.closed and not b.closed
        async with backends.session("/run/a.sock", lambda: named) as renewed:
            assert renewed is not a and not renewed.closed
        await backends.close()
        assert b.closed and renewed.closed and tcp.closed

    asyncio.run(go())


def test_streams_sharing_the_servers_buffers_over_the_unix_hop_stay_exact(
    export_factory, proxy_factory, tmp_path: Path
) -> None:
    # runs of 1 MiB and 4 KiB: each run's last block is small, and is still waiting in the
    # socket's queue when the next run's first block is read
    runs = [(i * 3 * MiB, MiB + 4096) for i in range(48)]
    disk = make_disk(tmp_path / "runs.img", 48 * 3 * MiB, runs, seed=7)
    sock = tmp_path / "run" / "vm1.sock"
    export = export_factory({"disk": disk}, "--unix-socket", str(sock))
    routes = tmp_path / "routes.yaml"
    route = {"namespace": "default", "name": "vm1", "url": export.url, "unixSocket": str(sock)}
    write_routes(routes, [route])
    proxy = proxy_factory(routes)
    data = disk.read_bytes()
    for attempt in range(5):
        out = tmp_path / f"out-{attempt}.img"
        req = DownloadRequest(
            url=f"{proxy.url}{PREFIX}/volumes/disk/disk.img",
            target=out,
            token=TOKEN,
            ca_bundle=str(proxy.ca),
            connections=4,
        )
        download(req)
        assert out.read_bytes() == data, f"download {attempt} differs"
        out.unlink()
