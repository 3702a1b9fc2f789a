"""Fixtures of the export tests: a CA, a token file, a sparse disk, export servers, proxies."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from export_support import TOKEN, MiB, make_disk
from server_support import Running, start_diskferry

from diskferry.serving.certs import create_ca


@pytest.fixture
def ca_dir(tmp_path: Path) -> Path:
    """A fresh CA."""
    d = tmp_path / "ca"
    create_ca(d)
    return d


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    """The export token in a file."""
    p = tmp_path / "token"
    p.write_text(TOKEN + "\n")
    return p


@pytest.fixture
def disk(tmp_path: Path) -> Path:
    """A 24 MiB sparse disk with three data runs, one ending at the last byte."""
    return make_disk(
        tmp_path / "disk.img",
        24 * MiB,
        [(1 * MiB, 3 * MiB + 5), (10 * MiB + 4096, 64 * 1024), (23 * MiB, MiB)],
    )


@pytest.fixture
def export_factory(
    tmp_path: Path, ca_dir: Path, token_file: Path
) -> Iterator[Callable[..., Running]]:
    """Starts `diskferry export serve` with the given volumes and extra options."""
    running: list[Running] = []

    def start(volumes: dict[str, Path], *extra: str, name: str = "vm1") -> Running:
        args = ["export", "serve", "--name", name, "--token-file", str(token_file)]
        args += ["--cert-dir", str(ca_dir), "--san", "127.0.0.1", "--san", "localhost"]
        for vol, path in volumes.items():
            args += ["--volume", f"{vol}={path}"]
        log = tmp_path / f"export-{len(running)}.log"
        r = start_diskferry([*args, *extra], log, ca_dir / "ca.crt")
        running.append(r)
        return r

    yield start
    for r in running:
        r.stop()


@pytest.fixture
def export(export_factory: Callable[..., Running], disk: Path) -> Running:
    """An export server for `disk` as volume `disk`."""
    return export_factory({"disk": disk})


@pytest.fixture
def proxy_factory(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """Starts `diskferry proxy serve` with its own CA on a routes file."""
    running: list[Running] = []
    proxy_ca = tmp_path / "proxy-ca"
    create_ca(proxy_ca)

    def start(routes: Path, *extra: str) -> Running:
        args = ["proxy", "serve", "--routes", str(routes), "--cert-dir", str(proxy_ca)]
        args += ["--san", "127.0.0.1", *extra]
        r = start_diskferry(args, tmp_path / f"proxy-{len(running)}.log", proxy_ca / "ca.crt")
        running.append(r)
        return r

    yield start
    for r in running:
        r.stop()
