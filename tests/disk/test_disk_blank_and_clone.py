"""Blank volumes and local clones: sparse files, BLKZEROOUT on a loop device, reflinks on XFS."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from diskferry.disk.blank import create_blank
from diskferry.disk.clone import CloneError, clone_volume
from diskferry.disk.prime import TargetError

MiB = 1 << 20
# XFS refuses file systems smaller than this
XFS_SIZE = 320 * MiB


def allocated(path: str | os.PathLike[str]) -> int:
    return os.stat(path).st_blocks * 512


def extent_flags(path: str | os.PathLike[str]) -> list[str]:
    """The flags column of each extent `filefrag -v` (FIEMAP) lists for `path`."""
    out = subprocess.run(
        ["filefrag", "-v", str(path)], capture_output=True, text=True, check=True
    ).stdout
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit() and ":" in line]
    return [row.rsplit(":", 1)[-1].strip() for row in rows]


def make_disk(path: Path, size: int = 64 * MiB) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
        f.seek(2 * MiB)
        f.write(os.urandom(3 * MiB))
        f.seek(size - MiB)
        f.write(os.urandom(MiB))
    return path


@pytest.fixture
def xfs(tmp_path: Path) -> Iterator[Path]:
    """A directory on a loop-mounted XFS made with reflink=1."""
    image, mount = tmp_path / "xfs.img", tmp_path / "xfs"
    with open(image, "wb") as f:
        f.truncate(XFS_SIZE)
    subprocess.run(["mkfs.xfs", "-q", "-m", "reflink=1", str(image)], check=True)
    mount.mkdir()
    proc = subprocess.run(["mount", "-o", "loop", str(image), str(mount)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot loop-mount XFS here: {proc.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_blank_file_is_sparse_and_of_its_size(tmp_path):
    target = tmp_path / "blank.raw"
    assert create_blank(str(target), 64 * MiB) == 64 * MiB
    assert target.stat().st_size == 64 * MiB
    assert allocated(target) == 0
    assert [n for n in os.listdir(tmp_path) if ".prime-" in n] == []


def test_blank_file_replaces_one_only_when_forced(tmp_path):
    target = tmp_path / "kept.raw"
    target.write_bytes(b"keep me")
    with pytest.raises(TargetError, match="give --force"):
        create_blank(str(target), MiB)
    assert target.read_bytes() == b"keep me"
    create_blank(str(target), MiB, replace=True)
    assert target.read_bytes() == bytes(MiB)


def test_blank_file_needs_a_size(tmp_path):
    with pytest.raises(TargetError, match="needs a size"):
        create_blank(str(tmp_path / "nosize.raw"), None)


def test_blank_block_device_is_zeroed_with_blkzeroout(diskferry, loop_device, tmp_path):
    device = loop_device(16 * MiB)
    backing = tmp_path / "loop0.img"
    with open(device, "r+b", buffering=0) as f:
        f.write(os.urandom(16 * MiB))
        os.fsync(f.fileno())
    assert not any("unwritten" in flags for flags in extent_flags(backing))
    result = diskferry("volume", "create", device, "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["size"] == 16 * MiB
    with open(device, "rb") as f:
        assert f.read() == bytes(16 * MiB)
    # the loop driver turns BLKZEROOUT into fallocate: unwritten extents, not written zeros
    flags = extent_flags(backing)
    assert flags and all("unwritten" in f for f in flags)


def test_blank_block_device_refuses_a_larger_size(loop_device):
    device = loop_device(8 * MiB)
    with pytest.raises(TargetError, match="larger than the block device"):
        create_blank(device, 16 * MiB)


def test_clone_on_xfs_shares_extents(diskferry, xfs):
    source = make_disk(xfs / "source.raw")
    clone = xfs / "clone.raw"
    result = diskferry("volume", "clone", source, clone, "--json")
    assert result.code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["method"] == "reflink"
    assert out["bytesWritten"] == 0
    assert clone.read_bytes() == source.read_bytes()
    flags = extent_flags(clone)
    assert flags and all("shared" in f for f in flags)
    assert all("shared" in f for f in extent_flags(source))


def test_clone_on_ext4_copies_and_keeps_holes(tmp_path):
    source = make_disk(tmp_path / "source.raw")
    clone = tmp_path / "clone.raw"
    result = clone_volume(str(source), str(clone))
    assert result.method == "copy"
    assert result.bytes_written == 4 * MiB
    assert clone.read_bytes() == source.read_bytes()
    assert allocated(clone) <= allocated(source)
    assert not any("shared" in f for f in extent_flags(clone))


def test_clone_across_file_systems_copies(xfs, tmp_path):
    source = make_disk(xfs / "source.raw")
    clone = tmp_path / "clone.raw"
    assert clone_volume(str(source), str(clone)).method == "copy"
    assert clone.read_bytes() == source.read_bytes()


def test_clone_into_a_block_device(loop_device, tmp_path):
    source = make_disk(tmp_path / "source.raw", 8 * MiB)
    device = loop_device(12 * MiB)
    with open(device, "r+b", buffering=0) as f:
        f.write(b"\x5a" * (12 * MiB))
    assert clone_volume(str(source), device).method == "copy"
    with open(device, "rb") as f:
        assert f.read() == source.read_bytes() + bytes(4 * MiB)


def test_clone_refuses_its_source_and_an_existing_file(tmp_path):
    source = make_disk(tmp_path / "source.raw", MiB * 8)
    other = tmp_path / "other.raw"
    other.write_bytes(b"keep me")
    with pytest.raises(TargetError, match="give --force"):
        clone_volume(str(source), str(other))
    assert other.read_bytes() == b"keep me"
    with pytest.raises(CloneError, match="is its source"):
        clone_volume(str(source), str(source))
    clone_volume(str(source), str(other), replace=True)
    assert other.read_bytes() == source.read_bytes()
