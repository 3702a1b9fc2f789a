"""Claims: directory claims under their class and namespace, block claims as loop devices over
sparse files, found again when detached, and removed with everything beside them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from diskferry.control.host.embedded.volumes import DirectoryVolumes, block_unavailable
from diskferry.control.host.volumes import VolumeClass
from diskferry.disk.file_volume import is_block_device

MiB = 1 << 20
FILES = VolumeClass("local")
BLOCK = VolumeClass("fast", "block")


def test_a_directory_claim_is_a_path_written_whole_later(tmp_path: Path) -> None:
    volumes = DirectoryVolumes(tmp_path)
    claim = volumes.claim(FILES, "default", "vd-a", 16 * MiB)
    assert claim.path == str(tmp_path / "volumes/local/default/vd-a.img")
    assert not claim.ready and claim.size() == 0 and not claim.block
    Path(claim.path).write_bytes(b"disk")
    Path(claim.path + ".prime-1234").write_bytes(b"left by a killed worker")
    found = volumes.find(FILES, "default", "vd-a")
    assert found == claim and found.ready and found.size() == 4
    volumes.remove(FILES, "default", "vd-a")
    assert not (tmp_path / "volumes/local/default").exists()
    assert volumes.find(FILES, "default", "vd-a") is None
    volumes.remove(FILES, "default", "vd-a")  # again: nothing to do


@pytest.fixture
def block_ok() -> None:
    why = block_unavailable()
    if why:
        pytest.skip(why)


def test_a_block_claim_is_a_loop_device_over_a_sparse_file(block_ok, tmp_path: Path) -> None:
    volumes = DirectoryVolumes(tmp_path)
    claim = volumes.claim(BLOCK, "ns1", "vd-b", 16 * MiB)
    try:
        assert claim.block and claim.ready and is_block_device(claim.path)
        assert claim.size() == 16 * MiB and os.stat(claim.file).st_blocks == 0
        with open(claim.path, "r+b") as dev:
            dev.write(b"written in place")
        assert volumes.claim(BLOCK, "ns1", "vd-b", 16 * MiB).path == claim.path  # made once
        subprocess.run(["losetup", "--detach", claim.path], check=True)
        again = volumes.find(BLOCK, "ns1", "vd-b")  # as after a reboot
        assert again is not None and is_block_device(again.path)
        with open(again.path, "rb") as dev:
            assert dev.read(16) == b"written in place"
    finally:
        volumes.remove(BLOCK, "ns1", "vd-b")
    assert not claim.file.exists()
    out = subprocess.run(["losetup", "--list", "--noheadings"], capture_output=True, text=True)
    assert str(claim.file) not in out.stdout
