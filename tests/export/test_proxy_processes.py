"""The export proxy in several processes on one port: each relays a share of the connections,
together they keep the pool's bounds, and none outlives the first or lingers on the port."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest
from export_support import TOKEN, MiB, curl, make_disk, write_routes
from server_support import Running

from diskferry.base.cpus import usable_cpus
from diskferry.export.backends import PoolSettings
from diskferry.export.job import MAX_DEFAULT_PROXY_PROCESSES, ProxyJob

AUTH = f"x-kubevirt-export-token: {TOKEN}"
PREFIX = "/api/export.kubevirt.io/v1/namespaces/default/virtualmachineexports/vm1"
DOWNLOADS = 40


def _others(pid: int) -> list[int]:
    """The proxy's other processes: the children of `pid` that run the proxy's process entry."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return [c for c in children if b"diskferry.export.proxy_process" in _cmdline(c)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _socket_bytes_read(pid: int) -> int:
    return int(Path(f"/proc/{pid}/io").read_text().split("rchar: ")[1].split()[0])


def _gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _cmdline(pid):
            return True
        time.sleep(0.05)
    return False


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _downloads(proxy: Running, tmp_path: Path, size: int) -> list[str]:
    config = tmp_path / "parallel.curl"
    url = f"{proxy.url}{PREFIX}/volumes/disk/disk.img"
    config.write_text(f'url = "{url}"\noutput = "/dev/null"\n' * DOWNLOADS)
    p = curl(
        *("--parallel", "--parallel-immediate", "--parallel-max", str(DOWNLOADS), "-H", AUTH),
        *("-w", "%{http_code} %{size_download}\n", "-K", str(config)),
        ca=proxy.ca,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout.decode().splitlines()


@pytest.fixture
def routed(export_factory, tmp_path: Path) -> tuple[Path, int]:
    """A routes file to an export server of a 4 MiB disk, and the disk's size."""
    disk = make_disk(tmp_path / "small.img", 4 * MiB, [(0, 4 * MiB)])
    export = export_factory({"disk": disk})
    routes = tmp_path / "routes.yaml"
    route = {"namespace": "default", "name": "vm1", "url": export.url, "caFile": str(export.ca)}
    write_routes(routes, [route])
    return routes, 4 * MiB


def test_each_process_relays_a_share_and_all_end_with_the_first(
    proxy_factory, routed: tuple[Path, int], tmp_path: Path
) -> None:
    routes, size = routed
    proxy = proxy_factory(routes, "--processes", "3")
    others = _others(proxy.proc.pid)
    assert len(others) == 2
    before = {pid: _socket_bytes_read(pid) for pid in [proxy.proc.pid, *others]}
    assert _downloads(proxy, tmp_path, size) == [f"200 {size}"] * DOWNLOADS
    relayed = {pid: _socket_bytes_read(pid) - n for pid, n in before.items()}
    assert all(n > size for n in relayed.values()), relayed
    assert proxy.stop() == 0
    assert all(_gone(pid, 5) for pid in others)
    assert _port_free(proxy.port)


def test_a_killed_first_process_takes_the_others_with_it(
    proxy_factory, routed: tuple[Path, int]
) -> None:
    routes, _ = routed
    proxy = proxy_factory(routes, "--processes", "2")
    [other] = _others(proxy.proc.pid)
    os.kill(proxy.proc.pid, signal.SIGKILL)
    proxy.proc.wait()
    assert _gone(other, 30)
    assert _port_free(proxy.port)


def test_the_first_process_warns_of_one_that_ended_and_goes_on(
    proxy_factory, routed: tuple[Path, int], tmp_path: Path
) -> None:
    routes, size = routed
    proxy = proxy_factory(routes, "--processes", "2")
    [other] = _others(proxy.proc.pid)
    os.kill(other, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while "ended with code -9" not in proxy.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert f"an export proxy process ({other}) ended with code -9" in proxy.log.read_text()
    assert _downloads(proxy, tmp_path, size) == [f"200 {size}"] * DOWNLOADS


def test_the_processes_share_the_pool_s_bounds_and_default_to_the_cpus() -> None:
    shared = PoolSettings(limit=100, per_backend=20).share(3)
    assert (shared.limit, shared.per_backend) == (34, 7)
    assert PoolSettings().share(1) == PoolSettings()
    job = ProxyJob(routes="r.yaml", certDir="c")
    assert job.processes == min(usable_cpus(), MAX_DEFAULT_PROXY_PROCESSES)
