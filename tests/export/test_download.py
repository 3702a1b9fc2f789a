"""The download client against the export server, the proxy, and a plain server that breaks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from export_plain_server import PlainServer
from export_support import TOKEN, MiB, make_disk, write_routes
from page_cache import cached_pages
from server_support import Running

from diskferry.disk.http import TlsError
from diskferry.export.download import DownloadRequest, download
from diskferry.export.errors import DownloadError
from diskferry.serving.certs import create_ca

PREFIX = "/api/export.kubevirt.io/v1beta1/namespaces/default/virtualmachineexports"


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "diskferry.cli.main", "export", "download", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_raw_download_fetches_only_allocated_ranges(
    export: Running, disk: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.img"
    p = _cli(
        f"{export.url}/volumes/disk/disk.img",
        str(out),
        "--token",
        TOKEN,
        "--ca-bundle",
        str(export.ca),
        "--connections",
        "3",
        "--json",
    )
    assert p.returncode == 0, p.stderr
    result = json.loads(p.stdout)
    assert out.read_bytes() == disk.read_bytes()
    assert result["extents"] is True and result["size"] == disk.stat().st_size
    assert result["bytesFetched"] <= 1.05 * _allocated(disk)
    assert _allocated(out) <= _allocated(disk) + MiB
    assert not list(tmp_path.glob("out.img.*"))


def test_a_raw_download_writes_its_aligned_runs_around_the_page_cache(
    export: Running, disk: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out.img"
    url = f"{export.url}/volumes/disk/disk.img"
    download(DownloadRequest(url, out, token=TOKEN, ca_bundle=str(export.ca)))
    # of the runs, only the pages that hold an end not on a page boundary went buffered
    assert cached_pages(out) <= 2
    assert out.read_bytes() == disk.read_bytes()


@pytest.mark.parametrize("encoding", ["gzip", "zstd"])
def test_compressed_download(
    export: Running, disk: Path, tmp_path: Path, token_file: Path, encoding: str
) -> None:
    out = tmp_path / "out.img"
    p = _cli(
        f"{export.url}/volumes/disk/disk.img",
        str(out),
        "--token-file",
        str(token_file),
        "--ca-bundle",
        str(export.ca),
        "--encoding",
        encoding,
        "--no-progress",
    )
    assert p.returncode == 0, p.stderr
    assert out.read_bytes() == disk.read_bytes()
    assert _allocated(out) <= _allocated(disk) + MiB


def test_download_through_the_proxy(
    export: Running, proxy_factory, disk: Path, tmp_path: Path
) -> None:
    routes = tmp_path / "routes.yaml"
    write_routes(
        routes,
        [{"namespace": "default", "name": "vm1", "url": export.url, "caFile": str(export.ca)}],
    )
    proxy = proxy_factory(routes)
    out = tmp_path / "out.img"
    req = DownloadRequest(
        url=f"{proxy.url}{PREFIX}/vm1/volumes/disk/disk.img",
        target=out,
        token=TOKEN,
        ca_bundle=str(proxy.ca),
    )
    result = download(req)
    assert result.sparse_map
    assert out.read_bytes() == disk.read_bytes()


def test_plain_server_without_extents_and_a_dropped_connection(
    ca_dir: Path, tmp_path: Path
) -> None:
    disk = make_disk(tmp_path / "plain.img", 24 * MiB, [(0, 24 * MiB)])
    # the one request for the whole run breaks after a third, and so does its resumption
    server = PlainServer(disk.read_bytes(), ca_dir, drops={1, 2})
    try:
        out = tmp_path / "out.img"
        result = download(server.request(out))
        assert not result.sparse_map
        assert out.read_bytes() == disk.read_bytes()
        starts = [int(r.split("=")[1].split("-")[0]) for r in server.ranges if r]
        assert any(s % MiB for s in starts), f"no request resumed mid-block: {server.ranges}"
    finally:
        server.stop()


def test_plain_server_stream_with_a_dropped_connection_resumes(
    ca_dir: Path, tmp_path: Path
) -> None:
    disk = make_disk(tmp_path / "plain.img", 3 * MiB, [(MiB, MiB)])
    server = PlainServer(disk.read_bytes(), ca_dir, drops={1})
    try:
        out = tmp_path / "out.img"
        download(server.request(out, encoding="raw"))
        assert out.read_bytes() == disk.read_bytes()
        assert server.ranges[1] is not None and server.ranges[1] != server.ranges[0]
    finally:
        server.stop()


def test_wrong_token_fails_cleanly_and_leaves_nothing(export: Running, tmp_path: Path) -> None:
    out = tmp_path / "out.img"
    p = _cli(
        f"{export.url}/volumes/disk/disk.img",
        str(out),
        "--token",
        "wrong",
        "--ca-bundle",
        str(export.ca),
    )
    assert p.returncode == 1
    warning, error = p.stderr.splitlines()
    assert warning.startswith("diskferry: warning: a token on the command line is visible")
    assert error.startswith("diskferry: error: ") and "BadToken" in error
    assert "wrong" not in p.stderr
    assert not out.exists()
    url = f"{export.url}/volumes/disk/disk.img"
    with pytest.raises(DownloadError, match="CA bundle"):
        download(DownloadRequest(url=url, target=out, ca_bundle=str(tmp_path / "missing.crt")))
    create_ca(tmp_path / "other")
    with pytest.raises(TlsError):
        download(DownloadRequest(url=url, target=out, ca_bundle=str(tmp_path / "other" / "ca.crt")))
    assert not out.exists() and not list(tmp_path.glob("out.img.*"))


def test_sigterm_leaves_no_partial_file(ca_dir: Path, tmp_path: Path) -> None:
    disk = make_disk(tmp_path / "plain.img", 128 * MiB, [(0, MiB)])
    server = PlainServer(disk.read_bytes(), ca_dir, drops=set(), delay=0.5)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "diskferry.cli.main",
                "export",
                "download",
                f"{server.url}/volumes/disk/disk.img",
                str(out_dir / "out.img"),
                "--ca-bundle",
                str(ca_dir / "ca.crt"),
                "--connections",
                "2",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        while not list(out_dir.iterdir()):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM
        assert err.strip().splitlines()[-1] == "diskferry: cancelled"
        assert list(out_dir.iterdir()) == []
    finally:
        server.stop()


def _data_runs(path: Path) -> list[tuple[int, int]]:
    """The file's data runs as SEEK_DATA and SEEK_HOLE find them."""
    runs, pos = [], 0
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while pos < size:
            try:
                start = os.lseek(f.fileno(), pos, os.SEEK_DATA)
            except OSError:
                break
            pos = os.lseek(f.fileno(), start, os.SEEK_HOLE)
            runs.append((start, pos))
    return runs


def test_raw_download_asks_once_for_each_allocated_run(
    export_factory, tmp_path: Path, token_file: Path
) -> None:
    # runs longer than a block and across 8 MiB boundaries, one ending at the last byte
    runs = [(MiB, 12 * MiB), (20 * MiB + 4096, 64 * 1024), (30 * MiB, 9 * MiB + 5)]
    source = make_disk(tmp_path / "runs.img", 64 * MiB, [*runs, (50 * MiB, 14 * MiB)])
    export = export_factory({"disk": source})
    out = tmp_path / "out.img"
    p = _cli(
        f"{export.url}/volumes/disk/disk.img",
        str(out),
        "--token-file",
        str(token_file),
        "--ca-bundle",
        str(export.ca),
        "--json",
    )
    assert p.returncode == 0, p.stderr
    export.stop()
    gets = [ln for ln in export.log.read_text().splitlines() if "GET /volumes/disk/disk.img" in ln]
    assert len(gets) == len(_data_runs(source)) == 4, gets
    assert out.read_bytes() == source.read_bytes()
    assert _data_runs(out) == _data_runs(source)
    assert json.loads(p.stdout)["bytesFetched"] == sum(b - a for a, b in _data_runs(source))
