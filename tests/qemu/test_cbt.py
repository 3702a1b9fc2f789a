"""CBT overlays: enable keeps the volume's data, tracks writes, resets and disables."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from qemu_helpers import KiB, MiB, image_bitmaps, write

from diskferry.qemu import cbt, img
from diskferry.qemu.bitmaps import BASE, Checkpoint, CheckpointNameError, checkpoint_name
from diskferry.qemu.storage_daemon import DaemonDisk, StorageDaemon


def test_enable_keeps_data_and_adds_an_enabled_base_bitmap(volume: str) -> None:
    with open(volume, "r+b") as f:
        f.seek(5 * MiB)
        f.write(b"keep me")
    disk = cbt.enable(volume)
    assert disk.overlay == volume + ".cbt.qcow2"
    assert sorted(os.listdir(os.path.dirname(volume))) == ["disk.raw", "disk.raw.cbt.qcow2"]
    with open(volume, "rb") as f:
        f.seek(5 * MiB)
        assert f.read(7) == b"keep me"
    assert image_bitmaps(disk.overlay) == {BASE: ["auto"]}
    state = cbt.status(volume)
    assert state.size == 32 * MiB
    assert [(c.name, c.enabled, c.granularity) for c in state.checkpoints] == [
        (BASE, True, 64 * KiB)
    ]


def test_an_overlay_is_its_owners_alone_whatever_the_umask(volume: str) -> None:
    old = os.umask(0o022)
    try:
        disk = cbt.enable(volume)
    finally:
        os.umask(old)
    assert disk.overlay is not None
    assert os.stat(disk.overlay).st_mode & 0o777 == 0o600


def test_writes_through_the_overlay_reach_the_volume_and_mark_the_bitmap(
    cbt_volume: cbt.CbtDisk,
) -> None:
    assert cbt_volume.overlay is not None
    write(cbt_volume.overlay, 1 * MiB, 64 * KiB, 0xAA)
    with open(cbt_volume.volume, "rb") as f:
        f.seek(1 * MiB)
        assert f.read(64 * KiB) == b"\xaa" * (64 * KiB)
    with StorageDaemon([DaemonDisk("d", cbt_volume.overlay)]) as daemon:
        assert daemon.qmp is not None
        node = next(
            n
            for n in daemon.qmp.command("query-named-block-nodes", flat=True)
            if n["node-name"] == "d"
        )
    bitmaps = [Checkpoint.from_qmp(b) for b in node["dirty-bitmaps"]]
    assert [(b.name, b.dirty_bytes) for b in bitmaps] == [(BASE, 64 * KiB)]


def test_either_path_finds_the_pair(cbt_volume: cbt.CbtDisk, tmp_path: Path) -> None:
    assert cbt.find(cbt_volume.volume) == cbt_volume
    assert cbt_volume.overlay is not None
    assert cbt.find(cbt_volume.overlay) == cbt_volume
    plain = tmp_path / "plain.raw"
    plain.write_bytes(b"\0" * 4096)
    assert cbt.find(str(plain)) == cbt.CbtDisk(str(plain), None)
    assert not cbt.status(str(plain)).disk.enabled


def test_an_overlay_of_another_volume_is_refused(cbt_volume: cbt.CbtDisk, tmp_path: Path) -> None:
    other = tmp_path / "other.raw"
    other.write_bytes(b"\0" * 4096)
    assert cbt_volume.overlay is not None
    os.rename(cbt_volume.overlay, str(other) + ".cbt.qcow2")
    with pytest.raises(cbt.CbtError, match=r"tracks .*disk\.raw, not .*other\.raw"):
        cbt.find(str(other))


def test_the_pair_is_found_from_the_overlay_header_without_qemu_img(
    cbt_volume: cbt.CbtDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_qemu_img(*args: object, **kwargs: object) -> None:
        raise AssertionError("qemu-img was run")

    monkeypatch.setattr(img, "run", no_qemu_img)
    monkeypatch.setattr(img, "info", no_qemu_img)
    assert cbt.find(cbt_volume.volume) == cbt_volume


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ([], "it has no raw data file"),
        (["-o", "data_file={data}"], "it has no raw data file"),
        (None, "not a qcow2 image"),
    ],
)
def test_an_overlay_that_is_not_one_is_refused(
    tmp_path: Path, options: list[str] | None, why: str
) -> None:
    volume = tmp_path / "disk.raw"
    volume.write_bytes(b"\0" * 65536)
    overlay = str(volume) + cbt.SUFFIX
    if options is None:
        Path(overlay).write_bytes(b"\0" * 4096)
    else:
        extra = [o.format(data=volume) for o in options]
        subprocess.run(
            ["qemu-img", "create", "-q", "-f", "qcow2", *extra, overlay, "64K"], check=True
        )
    with pytest.raises(cbt.CbtError, match=f"is not a CBT overlay: {why}"):
        cbt.find(str(volume))


def test_enable_twice_and_disable_without_cbt_are_refused(cbt_volume: cbt.CbtDisk) -> None:
    with pytest.raises(cbt.CbtError, match="already enabled"):
        cbt.enable(cbt_volume.volume)
    cbt.disable(cbt_volume.volume)
    with pytest.raises(cbt.CbtError, match="not enabled"):
        cbt.disable(cbt_volume.volume)


def test_disable_removes_only_the_overlay(cbt_volume: cbt.CbtDisk) -> None:
    assert cbt_volume.overlay is not None
    write(cbt_volume.overlay, 0, 64 * KiB, 0x11)
    assert cbt.disable(cbt_volume.overlay) == cbt.CbtDisk(cbt_volume.volume, None)
    assert not os.path.exists(cbt_volume.overlay)
    with open(cbt_volume.volume, "rb") as f:
        assert f.read(4) == b"\x11" * 4


def test_disable_refuses_an_overlay_a_qemu_has_open(cbt_volume: cbt.CbtDisk) -> None:
    assert cbt_volume.overlay is not None
    with (
        StorageDaemon([DaemonDisk("d", cbt_volume.overlay)]),
        pytest.raises(cbt.CbtError, match="open in a running QEMU: stop it first"),
    ):
        cbt.disable(cbt_volume.volume)
    assert os.path.exists(cbt_volume.overlay)


def test_reset_chain_drops_every_checkpoint_and_restarts_the_base(
    cbt_volume: cbt.CbtDisk,
) -> None:
    overlay = cbt_volume.overlay
    assert overlay is not None
    write(overlay, 0, 64 * KiB, 0x22)
    with StorageDaemon([DaemonDisk("d", overlay)]) as daemon:
        assert daemon.qmp is not None
        for name in ("diskferry-aaa-1", "diskferry-bbb-4", "user-bitmap"):
            daemon.qmp.command("block-dirty-bitmap-add", node="d", name=name, persistent=True)
    assert cbt.reset_chain(cbt_volume.volume) is True
    assert image_bitmaps(overlay) == {"user-bitmap": ["auto"], BASE: ["auto"]}
    with StorageDaemon([DaemonDisk("d", overlay)]) as daemon:
        assert daemon.qmp is not None
        node = next(
            n
            for n in daemon.qmp.command("query-named-block-nodes", flat=True)
            if n["node-name"] == "d"
        )
    counts = {b["name"]: b["count"] for b in node["dirty-bitmaps"]}
    assert counts[BASE] == 0


def test_reset_chain_without_cbt_does_nothing(volume: str) -> None:
    assert cbt.reset_chain(volume) is False


def test_checkpoint_names_carry_the_repository() -> None:
    name = checkpoint_name("0123abcd", 7)
    assert name == "diskferry-0123abcd-7"
    checkpoint = Checkpoint(name, 65536, True)
    assert (checkpoint.repo_id, checkpoint.seq) == ("0123abcd", 7)
    assert Checkpoint(BASE, 65536, True).repo_id is None
    with pytest.raises(CheckpointNameError):
        checkpoint_name("bad-id", 1)
