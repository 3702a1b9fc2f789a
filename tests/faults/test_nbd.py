"""Backups from qemu-nbd behind a relay that breaks the connection: one error line naming the
server, no snapshot and a repository that checks, then a retry that succeeds; never wrong
bytes where the transport can tell (TLS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from relay import Fault

sys.path.insert(0, str(Path(__file__).parent.parent / "nbd"))

from nbd_pki import make_pki, tls_args

from diskferry.backup.config import KdfParams
from diskferry.backup.repository import Repository
from diskferry.nbd.errors import NbdError
from diskferry.nbd.volume import NbdVolume

MiB = 1 << 20
PASSWORD = "nbd faults"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def disk(tmp_path) -> Path:
    path = tmp_path / "disk.raw"
    with open(path, "wb") as f:
        f.truncate(32 * MiB)
        f.seek(3 * MiB)
        f.write(os.urandom(6 * MiB))
    return path


@pytest.fixture
def nbd_server(tmp_path, disk):
    """Start qemu-nbd on a Unix socket for `disk` with extra options; its socket."""
    procs = []

    def start(*extra: str) -> str:
        sock = str(tmp_path / f"nbd-{len(procs)}.sock")
        argv = ["qemu-nbd", "--persistent", "--shared=8", f"--socket={sock}", "-f", "raw", "-r"]
        procs.append(subprocess.Popen([*argv, *extra, str(disk)], stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 15
        while not os.path.exists(sock):
            assert procs[-1].poll() is None and time.monotonic() < deadline, "no qemu-nbd"
            time.sleep(0.02)
        return sock

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.fixture
def repo(tmp_path, diskferry) -> str:
    url = str(tmp_path / "repo")
    Repository.init(url, PASSWORD, kdf=KdfParams(n=1 << 10, r=8, p=1)).close()
    diskferry.env.update(DISKFERRY_PASSWORD=PASSWORD, DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    return url


def _backup(diskferry, repo: str, url: str):
    return diskferry("backup", "--repo", repo, "--vm", "vm", "--disk", f"d={url}", "--json")


def _fails_cleanly_then_succeeds(diskferry, repo, r, url, disk, tmp_path, fault) -> str:
    r.arm(fault)
    failed = _backup(diskferry, repo, url)
    assert failed.code == 1, failed.stderr
    assert r.fired == 1
    r.arm(None)
    with Repository.open(repo, PASSWORD) as opened:
        assert opened.list_snapshots() == []
    checked = diskferry("repo", "check", "--read-data", "--repo", repo, "--no-progress")
    assert checked.code == 0, checked.stderr
    done = _backup(diskferry, repo, url)
    assert done.code == 0, done.stderr
    (snapshot,) = (d["snapshot"] for d in json.loads(done.stdout)["disks"])
    out = tmp_path / "out.raw"
    restored = diskferry("restore", snapshot, out, "--repo", repo, "--no-progress")
    assert restored.code == 0, restored.stderr
    assert out.read_bytes() == disk.read_bytes()
    return failed.error


@pytest.mark.parametrize(
    "fault",
    [
        Fault("drop", at=MiB),
        Fault("reset", at=2 * MiB),
        Fault("truncate", at=MiB),
        Fault("drop"),
        Fault("flip", at=100),
        Fault("flip", at=20, direction="up"),
    ],
    ids=["drop-data", "reset-data", "truncate-data", "drop-handshake", "flip-reply", "flip-ask"],
)
def test_a_broken_connection_fails_naming_the_server(
    diskferry, repo, relay, nbd_server, disk, tmp_path, fault
):
    r = relay(nbd_server())
    url = f"nbd://{r.address}/"
    error = _fails_cleanly_then_succeeds(diskferry, repo, r, url, disk, tmp_path, fault)
    assert url in error


def test_a_flipped_data_byte_breaks_tls_not_the_backup(
    diskferry, repo, relay, nbd_server, disk, tmp_path, pki
):
    server_dir, client_dir, _ = pki
    r = relay(nbd_server(*tls_args(server_dir)))
    url = f"nbds://{r.address}/?tls-certificates={client_dir}&tls-hostname=localhost"
    fault = Fault("flip", at=3 * MiB)
    error = _fails_cleanly_then_succeeds(diskferry, repo, r, url, disk, tmp_path, fault)
    assert f"nbds://{r.address}/" in error


def test_a_stalled_server_fails_at_the_request_deadline(relay, nbd_server):
    r = relay(nbd_server())
    url = f"nbd://{r.address}/"
    r.arm(Fault("stall", at=MiB))
    with NbdVolume.open(url, request_timeout=2) as volume, pytest.raises(NbdError) as caught:
        volume.read(0, 8 * MiB)
    assert r.fired == 1
    assert url in str(caught.value)
    r.arm(None)
    with NbdVolume.open(url) as volume:
        assert len(volume.read(0, 8 * MiB)) == 8 * MiB
