"""An export's server over time: its certificate renewed at half its short life while a
download goes on, a server that ends unexpectedly started again on its port, and a daemon
started again finding its exports serving."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from control_support import wait_until
from cryptography import x509
from vmexport_support import (
    ExportDaemon,
    connect,
    get,
    get_when_up,
    listening_cert,
    raw_url,
    served_cert,
)

from diskferry.control.host.servers import PORT_ANNOTATION, free_port
from diskferry.export.token import TOKEN_HEADER

EXPORT = "VirtualMachineExport"
SOURCE = {"source": {"apiGroup": "diskferry.io", "kind": "VirtualDisk", "name": "vd1"}}
LIFETIME = timedelta(seconds=10)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def started(data_dir: Path) -> Iterator[list[ExportDaemon]]:
    """Daemons started by the test over `data_dir`; the workers stopped at its end."""
    daemons: list[ExportDaemon] = []
    yield daemons
    for daemon in daemons:
        daemon.stop()
    if daemons:
        daemons[-1].stop_workers()


def _expiry(der: bytes):
    return x509.load_der_x509_certificate(der).not_valid_after_utc


def test_the_certificate_is_renewed_during_a_download(data_dir, started, nginx, images) -> None:
    daemon = ExportDaemon(data_dir, free_port(), LIFETIME)
    started.append(daemon)
    disk = daemon.ready_disk(nginx, images.reference)
    claim = daemon.claim(disk).read_bytes()
    daemon.apply(EXPORT, "ex1", SOURCE)
    export = daemon.wait_phase(EXPORT, "ex1", "Ready", timeout=60)
    internal = export["status"]["links"]["internal"]
    url, ca = raw_url(internal), internal["cert"]
    token = daemon.token("export-token-ex1")
    proxy_url = daemon.controllers.proxy.base_url
    proxy_before = wait_until(lambda: listening_cert(proxy_url, ca), 30)

    conn = connect(url, ca)
    conn.request("GET", urlsplit(url).path, headers={TOKEN_HEADER: token})
    response = conn.getresponse()
    head = response.read(1 << 20)
    assert conn.sock is not None
    before = conn.sock.getpeercert(binary_form=True)
    after = wait_until(lambda: (c := served_cert(url, ca)) != before and c, 30)
    assert _expiry(after) > _expiry(before)
    body = head + response.read()
    conn.close()
    assert body == claim
    assert get(url, ca, token) == (200, claim)
    wait_until(lambda: served_cert(proxy_url, ca) != proxy_before, 30)
    external = export["status"]["links"]["external"]
    assert get(raw_url(external), ca, token) == (200, claim)


def _worker(daemon: ExportDaemon, uid: str) -> int:
    return wait_until(lambda: daemon.workers(f"vmexport-{uid}"), 10)[0]


def _ready_again(daemon: ExportDaemon, name: str) -> bool:
    """Whether the export became Ready a second time (its Event counted twice)."""
    return any(e["reason"] == "ExportReady" and e["count"] >= 2 for e in daemon.events(name))


def test_a_server_that_ends_is_started_again_on_its_port(data_dir, started, nginx, images) -> None:
    daemon = ExportDaemon(data_dir, free_port())
    started.append(daemon)
    disk = daemon.ready_disk(nginx, images.reference)
    daemon.apply(EXPORT, "ex1", SOURCE)
    export = daemon.wait_phase(EXPORT, "ex1", "Ready", timeout=60)
    uid = export["metadata"]["uid"]
    pid = _worker(daemon, uid)
    hop = Path(daemon.controllers.proxy.routes()[("default", "ex1")].unix_socket or "")
    killed = hop.lstat().st_ino
    os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: "ServerRestarted" in {e["reason"] for e in daemon.events("ex1")}, 30)
    wait_until(lambda: _ready_again(daemon, "ex1"), 60)
    # the socket the killed server left was replaced by its successor's, which the proxy uses
    assert hop.lstat().st_ino != killed
    again = daemon.get(EXPORT, "ex1")
    assert _worker(daemon, uid) != pid
    annotations = again["metadata"]["annotations"]
    assert annotations[PORT_ANNOTATION] == export["metadata"]["annotations"][PORT_ANNOTATION]
    assert again["status"]["links"] == export["status"]["links"]
    token = daemon.token("export-token-ex1")
    claim = daemon.claim(disk).read_bytes()
    for link in again["status"]["links"]["internal"], again["status"]["links"]["external"]:
        assert get_when_up(raw_url(link), link["cert"], token) == (200, claim)


def test_a_daemon_started_again_finds_its_exports_serving(data_dir, started, nginx, images) -> None:
    proxy_port = free_port()
    first = ExportDaemon(data_dir, proxy_port)
    started.append(first)
    disk = first.ready_disk(nginx, images.reference)
    first.apply(EXPORT, "ex1", SOURCE)
    export = first.wait_phase(EXPORT, "ex1", "Ready", timeout=60)
    pid = _worker(first, export["metadata"]["uid"])
    first.stop()
    started.remove(first)

    second = ExportDaemon(data_dir, proxy_port)
    started.append(second)
    assert ("default", "ex1") in second.controllers.proxy.routes()
    again = second.wait_phase(EXPORT, "ex1", "Ready", timeout=60)
    assert _worker(second, export["metadata"]["uid"]) == pid
    assert again["status"]["links"] == export["status"]["links"]
    external = again["status"]["links"]["external"]
    token = second.token("export-token-ex1")
    assert get_when_up(raw_url(external), external["cert"], token) == (
        200,
        second.claim(disk).read_bytes(),
    )


def test_a_proxy_that_ends_is_started_again_with_its_routes(
    data_dir, started, nginx, images
) -> None:
    daemon = ExportDaemon(data_dir, free_port())
    started.append(daemon)
    disk = daemon.ready_disk(nginx, images.reference)
    daemon.apply(EXPORT, "ex1", SOURCE)
    export = daemon.wait_phase(EXPORT, "ex1", "Ready", timeout=60)
    pid = wait_until(lambda: daemon.workers("export-proxy"), 10)[0]
    os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: (found := daemon.workers("export-proxy")) and found != [pid], 30)
    external = export["status"]["links"]["external"]
    token = daemon.token("export-token-ex1")
    claim = daemon.claim(disk).read_bytes()
    assert get_when_up(raw_url(external), external["cert"], token) == (200, claim)
