"""Full backups of NBD exports given as disk URLs: what the server's extents say is read."""

import os
import socket
import subprocess
import time

import pytest
from backup_support import MiB, engine_fixture  # noqa: F401

_START_TIMEOUT = 15.0


@pytest.fixture
def nbdkit_url(tmp_path):
    """Start nbdkit with the given arguments on a Unix socket; its URL. Stopped at the end."""
    procs = []

    def start(*args: str) -> str:
        sock = tmp_path / f"nbdkit-{len(procs)}.sock"
        procs.append(subprocess.Popen(["nbdkit", "-f", "-U", str(sock), *args]))
        deadline = time.monotonic() + _START_TIMEOUT
        while not _listening(sock):
            assert procs[-1].poll() is None and time.monotonic() < deadline, "nbdkit did not start"
            time.sleep(0.01)
        return f"nbd+unix:///?socket={sock}"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def _listening(path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
    return True


def test_a_hole_that_is_not_zero_is_backed_up(engine, nbdkit_url, tmp_path):
    disk = tmp_path / "backed.raw"
    with open(disk, "wb") as f:
        f.truncate(16 * MiB)
        f.write(os.urandom(3 * MiB))
        f.seek(8 * MiB)
        f.write(os.urandom(MiB))
    listing = tmp_path / "extents.txt"
    listing.write_text("0 3M hole\n8M 1M\n")  # the first 3 MiB: unallocated, yet not zeros
    url = nbdkit_url("-r", "--filter=extentlist", "file", str(disk), f"extentlist={listing}")
    result = engine.backup("nbd-vm", {"d": url}).disks[0]
    assert result.type == "full"
    assert result.bytes_read == 4 * MiB
    engine.keep(result.snapshot, disk)
    assert engine.restores_exactly(result.snapshot)
