"""SIGTERM and SIGINT cancel a command's engine: it cleans up what it made, leaves target and
repository as they were, prints `diskferry: cancelled` and exits 143 or 130."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pexpect
import pytest

MiB = 1 << 20
PASSWORD = "cancel password"
OLD = b"the target as it was\n" * 1000


def _start(env: dict[str, str], *args: str | os.PathLike[str]) -> subprocess.Popen[str]:
    exe = Path(sys.executable).with_name("diskferry")
    return subprocess.Popen(
        [str(exe), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def _signal_when(proc: subprocess.Popen[str], ready: Callable[[], bool], sig: int) -> str:
    """Send `sig` once `ready()` holds; the command's stderr, checked to end as cancelled."""
    deadline = time.monotonic() + 60
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never got there"
        time.sleep(0.01)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err
    assert err.splitlines()[-1] == "diskferry: cancelled", err
    assert "Traceback" not in err and "diskferry: error:" not in err
    return err


@pytest.fixture
def trickling(faulty, tmp_path: Path) -> str:
    """A 12 MiB raw disk served 256 KiB every 50 ms."""
    source = tmp_path / "served" / "disk.img"
    source.parent.mkdir()
    source.write_bytes(os.urandom(12 * MiB))
    return faulty.add("disk.img", source, piece=256 * 1024, trickle=0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_import_leaves_the_target_as_it_was(
    diskferry, images, trickling, tmp_path: Path, sig: int
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "disk.raw"
    target.write_bytes(OLD)
    proc = _start(diskferry.env, "import", trickling, target, "--no-progress", "--force")
    err = _signal_when(proc, lambda: bool(images.leftovers(out)), sig)
    assert f"diskferry: removed what it wrote: {target} is as it was\n" in err
    assert target.read_bytes() == OLD
    assert images.leftovers(out) == [] and images.leftovers(tmp_path) == []


def _sparse_disk(path: Path, size: int, data: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(MiB)
        f.write(os.urandom(data))
    return path


def test_a_signalled_backup_leaves_the_repository_as_it_was(
    diskferry, slow_nbd, tmp_path: Path
) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    diskferry.env.update(
        DISKFERRY_PASSWORD=PASSWORD,
        DISKFERRY_CACHE_DIR=str(tmp_path / "cache"),
        TMPDIR=str(scratch),
    )
    repo = tmp_path / "repo"
    assert diskferry("repo", "init", "--repo", repo).code == 0
    tracked = _sparse_disk(tmp_path / "tracked.raw", 16 * MiB, 2 * MiB)
    assert diskferry("cbt", "enable", tracked).code == 0
    # read at 5 MB/s or so: the first 16 MiB pack is uploaded well before the disk is read whole
    slow = slow_nbd(_sparse_disk(tmp_path / "slow.raw", 40 * MiB, 32 * MiB), "40M")
    proc = _start(
        diskferry.env,
        "backup", "--repo", repo, "--vm", "vm", "--no-progress",
        "--disk", f"slow={slow}", "--disk", f"tracked={tracked}",
    )  # fmt: skip

    def a_pack_is_uploaded() -> bool:
        return any(p.is_file() for p in (repo / "packs").rglob("*"))

    err = _signal_when(proc, a_pack_is_uploaded, signal.SIGTERM)
    assert "diskferry: removed what it wrote: the repository is as it was\n" in err
    assert not [p.name for p in scratch.rglob("qs-*")]  # no storage daemon's folder left
    checked = diskferry("repo", "check", "--repo", repo, "--json")
    assert checked.code == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert (report["ok"], report["snapshots"], report["unusedPacks"]) == (True, 0, [])
    assert not list((repo / "packs").rglob("*.*")) and not list((repo / "locks").iterdir())
    assert not [p for p in (repo / "packs").rglob("*") if p.is_file()]


HOLDER = """
import sys
from diskferry.backup.locks import acquire
from diskferry.objstore.store import ObjectStore
with acquire(ObjectStore(sys.argv[1]), sys.argv[2], "holding"):
    print("held", flush=True)
    sys.stdin.readline()
"""


@contextlib.contextmanager
def _lock_held(repo: Path, kind: str) -> Iterator[Path]:
    """A lock of `kind` on `repo`, held by another process while the block runs; its file."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(repo), kind],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        (held,) = (repo / "locks").iterdir()
        yield held
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def repo(diskferry, tmp_path: Path) -> Path:
    """An initialised repository, its password and cache in the CLI's environment."""
    diskferry.env.update(DISKFERRY_PASSWORD=PASSWORD, DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    path = tmp_path / "repo"
    assert diskferry("repo", "init", "--repo", path).code == 0
    return path


def _waiting(proc: subprocess.Popen[str]) -> Callable[[], bool]:
    """Ready once the command said that it waits for a lock."""
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("diskferry: waiting: ")
    return lambda: True


def test_a_signal_ends_a_wait_for_a_lock(diskferry, repo: Path) -> None:
    with _lock_held(repo, "shared") as held:
        proc = _start(diskferry.env, "prune", "--repo", repo, "--wait")
        _signal_when(proc, _waiting(proc), signal.SIGINT)
        assert list((repo / "locks").iterdir()) == [held]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_restore_leaves_the_target_as_it_was(
    diskferry, repo: Path, tmp_path: Path, sig: int
) -> None:
    disk = _sparse_disk(tmp_path / "disk.raw", 4 * MiB, MiB)
    assert diskferry("backup", "--repo", repo, "--vm", "vm", "--disk", f"d={disk}").code == 0
    target = tmp_path / "restored.raw"
    target.write_bytes(OLD)
    with _lock_held(repo, "exclusive") as held:
        proc = _start(
            diskferry.env, "restore", "latest", target, "--repo", repo,
            "--vm", "vm", "--disk", "d", "--force", "--wait", "--no-progress",
        )  # fmt: skip
        err = _signal_when(proc, _waiting(proc), sig)
        assert list((repo / "locks").iterdir()) == [held]
    assert f"diskferry: removed what it wrote: {target} is as it was\n" in err
    assert target.read_bytes() == OLD


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_download_makes_no_target(
    diskferry, images, trickling, tmp_path: Path, sig: int
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    target = out / "disk.img"
    proc = _start(diskferry.env, "export", "download", trickling, target, "--no-progress")
    err = _signal_when(proc, lambda: bool(images.leftovers(out)), sig)
    assert f"diskferry: removed what it wrote: {target} is not made\n" in err
    assert list(out.iterdir()) == []


def test_ctrl_c_on_a_terminal_cancels_an_import(
    diskferry, images, trickling, tmp_path: Path
) -> None:
    target = tmp_path / "disk.raw"
    exe = Path(sys.executable).with_name("diskferry")
    child = pexpect.spawn(
        str(exe), ["import", trickling, str(target)], env=diskferry.env, dimensions=(24, 80)
    )
    try:
        child.expect("B/s", timeout=60)  # the progress bar drawn on the terminal
        child.sendintr()
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    said = child.before.decode().replace("\r\n", "\n")
    assert child.exitstatus == 130, said
    assert said.endswith(
        f"diskferry: removed what it wrote: {target} is not made\ndiskferry: cancelled\n"
    )
    assert "Traceback" not in said and "diskferry: error:" not in said
    assert not target.exists() and images.leftovers(tmp_path) == []
