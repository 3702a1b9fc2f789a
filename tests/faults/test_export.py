"""Downloads from the export server behind a relay that breaks the connection: a correct
resume or one error line naming the server, never wrong bytes, and a retry that succeeds."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from relay import Fault

sys.path.insert(0, str(Path(__file__).parent.parent / "export"))

from export_support import TOKEN, MiB, make_disk
from server_support import start_diskferry

from diskferry.serving.certs import create_ca


@pytest.fixture
def export(tmp_path: Path):
    """`diskferry export serve` of a 24 MiB sparse disk; (server, disk)."""
    ca = tmp_path / "ca"
    create_ca(ca)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    disk = make_disk(tmp_path / "disk.img", 24 * MiB, [(MiB, 9 * MiB + 5), (23 * MiB, MiB)])
    args = ["export", "serve", "--name", "vm1", "--token-file", str(token), "--cert-dir", str(ca)]
    args += ["--san", "127.0.0.1", "--volume", f"disk={disk}"]
    server = start_diskferry(args, tmp_path / "export.log", ca / "ca.crt")
    yield server, disk
    server.stop()


def _download(diskferry, relay_address: str, ca: Path, target: Path, *extra: str):
    url = f"https://{relay_address}/volumes/disk/disk.img"
    args = ("--token", TOKEN, "--ca-bundle", ca, "--no-progress", *extra)
    return diskferry("export", "download", url, target, *args)


@pytest.mark.parametrize(
    ("fault", "encoding"),
    [
        (Fault("drop", at=2 * MiB, times=2), "raw"),
        (Fault("reset", at=3 * MiB, times=2), "raw"),
        (Fault("truncate", at=MiB), "raw"),
        (Fault("reset", at=MiB), "zstd"),
        (Fault("flip", at=2 * MiB), "raw"),
        (Fault("flip", at=MiB), "gzip"),
    ],
    ids=["drop", "reset", "truncate", "reset-zstd", "flip", "flip-gzip"],
)
def test_a_broken_download_resumes_or_fails_then_succeeds(
    diskferry, export, relay, tmp_path, fault, encoding
):
    server, disk = export
    r = relay(("127.0.0.1", server.port))
    target = tmp_path / "out.img"
    r.arm(fault)
    first = _download(diskferry, r.address, server.ca, target, "--encoding", encoding)
    assert r.fired == fault.times
    if first.code == 0:
        assert target.read_bytes() == disk.read_bytes()
    else:
        assert first.code == 1, first.stderr
        assert r.address in first.error
        assert not target.exists()
    r.arm(None)
    again = _download(diskferry, r.address, server.ca, target, "--encoding", encoding, "--force")
    assert again.code == 0, again.stderr
    assert target.read_bytes() == disk.read_bytes()
    assert [p.name for p in tmp_path.iterdir() if ".part" in p.name] == []


def test_a_server_that_always_resets_fails_naming_it(diskferry, export, relay, tmp_path):
    server, _ = export
    r = relay(("127.0.0.1", server.port))
    target = tmp_path / "out.img"
    target.write_bytes(b"kept\n")
    r.arm(Fault("reset", times=10_000))
    failed = _download(diskferry, r.address, server.ca, target)
    assert failed.code == 1, failed.stderr
    assert r.address in failed.error
    assert target.read_bytes() == b"kept\n"
    assert [p.name for p in tmp_path.iterdir() if ".part" in p.name] == []
