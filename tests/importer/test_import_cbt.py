"""An import over a volume with changed-block tracking resets its chain."""

from __future__ import annotations

import subprocess
from pathlib import Path

from diskferry.qemu import cbt
from diskferry.qemu.bitmaps import BASE

CHECKPOINT = "diskferry-r1-1"


def _bitmaps(volume: Path) -> list[str]:
    return sorted(c.name for c in cbt.status(str(volume)).checkpoints)


def _tracked_volume(directory: Path, size: int) -> Path:
    """A raw volume with CBT on and one repository checkpoint besides the base bitmap."""
    directory.mkdir(exist_ok=True)
    volume = directory / "vm.raw"
    with open(volume, "wb") as f:
        f.truncate(size)
    cbt.enable(str(volume))
    overlay = cbt.overlay_path(str(volume))
    subprocess.run(
        ["qemu-img", "bitmap", "--add", "--enable", "-f", "qcow2", overlay, CHECKPOINT],
        check=True,
    )
    return volume


def test_import_over_a_tracked_volume_resets_its_chain(diskferry, images, tmp_path: Path) -> None:
    volume = _tracked_volume(tmp_path / "v", images.disk_size)
    assert CHECKPOINT in _bitmaps(volume)
    result = diskferry("import", images.get("qcow2"), volume, "--no-progress", "--force")
    assert result.code == 0, result.stderr
    assert "chain was reset" in result.stderr
    assert _bitmaps(volume) == [BASE]
    assert images.same(images.reference, volume)


def test_import_aimed_at_the_overlay_writes_its_volume(diskferry, images, tmp_path: Path) -> None:
    volume = _tracked_volume(tmp_path / "v", images.disk_size)
    overlay = cbt.overlay_path(str(volume))
    result = diskferry("import", images.get("raw", "gzip"), overlay, "--no-progress", "--force")
    assert result.code == 0, result.stderr
    assert images.same(images.reference, volume)
    assert cbt.find(overlay).volume == str(volume)
    assert _bitmaps(volume) == [BASE]


def test_a_tracked_volume_takes_only_raw(diskferry, images, tmp_path: Path) -> None:
    volume = _tracked_volume(tmp_path / "v", 1 << 20)
    volume.write_bytes(b"keep me" * 1000)
    before = volume.read_bytes()
    result = diskferry("import", images.get("raw"), volume, "--format", "qcow2", "--no-progress")
    assert result.code == 1
    assert "has CBT: it can only hold a raw disk" in result.error
    assert volume.read_bytes() == before
    assert CHECKPOINT in _bitmaps(volume)
    assert images.leftovers(volume.parent) == []
