"""Restore: latest, --force, sizes, qcow2, block devices, CBT targets, and damaged packs."""

import os
import subprocess
from pathlib import Path

import pytest
from backup_support import PASSWORD, MiB, engine_fixture, make_disk, same, write  # noqa: F401

from diskferry.backup.errors import CorruptObjectError, SnapshotNotFoundError
from diskferry.backup.index_cache import IndexCache
from diskferry.backup.repository import Repository
from diskferry.disk.prime import TargetError
from diskferry.disk.write_behind import WriteBehind
from diskferry.qemu import cbt


def _leftovers(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if ".prime-" in n or ".scratch-" in n]


@pytest.fixture
def backed_up(engine, tmp_path):
    """A CBT disk with a full and an incremental backup; the snapshots, oldest first."""
    volume = make_disk(tmp_path / "disk.raw")
    first = engine.backup(disks={"d": volume}).disks[0].snapshot
    engine.keep(first, volume)
    write(volume + ".cbt.qcow2", 2 * MiB + 100 * 1024, 64 * 1024, 0x42)  # inside a chunk
    second = engine.backup(disks={"d": volume}).disks[0].snapshot
    engine.keep(second, volume)
    return volume, first, second


def test_latest_needs_vm_and_disk_and_finds_the_newest(engine, backed_up, tmp_path):
    _, _, second = backed_up
    out = tmp_path / "out.raw"
    with pytest.raises(SnapshotNotFoundError, match="--vm and --disk"):
        engine.restore("latest", out)
    with pytest.raises(SnapshotNotFoundError, match="no snapshot of disk other"):
        engine.restore("latest", out, vm="vm", disk="other")
    result = engine.restore("latest", out, vm="vm", disk="d")
    assert result.snapshot == second
    with Repository.open(engine.url, PASSWORD) as repo:
        entries = repo.load_snapshot(repo.find_snapshot(second)).entries()
        named = {e.chunk for e in entries if e.chunk is not None}
    assert result.chunks_read == len(named)  # each chunk read once, however many entries
    assert same(out, engine.references[second])
    assert os.stat(out).st_blocks * 512 < 4 * MiB + 128 * 1024  # holes and zeros stay holes
    with pytest.raises(SnapshotNotFoundError):
        engine.restore("0000000000000000", tmp_path / "none.raw")
    assert not (tmp_path / "none.raw").exists()


def test_an_existing_target_is_replaced_only_with_force(engine, backed_up, tmp_path):
    _, first, _ = backed_up
    out = tmp_path / "out.raw"
    out.write_bytes(b"keep me")
    with pytest.raises(TargetError, match="give --force"):
        engine.restore(first, out)
    assert out.read_bytes() == b"keep me"
    engine.restore(first, out, force=True)
    assert same(out, engine.references[first])
    assert _leftovers(tmp_path) == []


def test_size_grows_the_disk_and_a_smaller_one_is_refused(engine, backed_up, tmp_path):
    _, first, _ = backed_up
    with pytest.raises(TargetError, match="smaller than the disk"):
        engine.restore(first, tmp_path / "small.raw", size=16 * MiB)
    assert not (tmp_path / "small.raw").exists()
    big = tmp_path / "big.raw"
    assert engine.restore(first, big, size=64 * MiB).size == 64 * MiB
    assert big.stat().st_size == 64 * MiB
    assert big.read_bytes()[: 32 * MiB] == engine.references[first].read_bytes()
    assert _leftovers(tmp_path) == []


def test_qcow2_output(engine, backed_up, tmp_path):
    _, _, second = backed_up
    out = tmp_path / "out.qcow2"
    assert engine.restore(second, out, format="qcow2").format == "qcow2"
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", str(out)], capture_output=True, text=True, check=True
    )
    assert '"format": "qcow2"' in info.stdout
    assert same(out, engine.references[second])
    assert _leftovers(tmp_path) == []


def test_restoring_over_a_cbt_volume_resets_its_chain(engine, backed_up):
    volume, first, second = backed_up
    with pytest.raises(cbt.CbtError, match="only hold a raw disk"):
        engine.restore(first, volume, force=True, format="qcow2")
    assert same(volume, engine.references[second])
    result = engine.restore(first, volume + ".cbt.qcow2", force=True)  # the overlay names it
    assert result.target == volume and result.chain_reset
    assert same(volume, engine.references[first])
    names = [c.name for c in cbt.status(volume).checkpoints]
    assert names == ["diskferry-base"]
    again = engine.backup(disks={"d": volume}).disks[0]
    assert again.type == "full"
    engine.keep(again.snapshot, volume)
    assert engine.restores_exactly(again.snapshot)


def test_a_block_device_is_written_in_place(engine, backed_up, loop_device):
    _, first, second = backed_up
    small = loop_device(16 * MiB)
    with pytest.raises(TargetError):
        engine.restore(first, small, force=True)
    device = loop_device(48 * MiB)
    with pytest.raises(TargetError, match="give --force"):
        engine.restore(second, device)
    with open(device, "r+b") as f:
        f.write(b"\xff" * 48 * MiB)  # holes of the snapshot must become zeros
    engine.restore(second, device, force=True)
    with open(device, "rb") as f:
        data = f.read()
    assert data[: 32 * MiB] == engine.references[second].read_bytes()
    assert data[32 * MiB :] == b"\xff" * (16 * MiB)


def _flip_a_byte_in_every_pack(repo_dir: Path) -> None:
    for pack in (repo_dir / "packs").rglob("*"):
        if pack.is_file():
            blob = bytearray(pack.read_bytes())
            blob[len(blob) // 3] ^= 0x01
            pack.write_bytes(bytes(blob))


def test_a_damaged_pack_fails_the_restore_and_leaves_no_target(engine, backed_up, tmp_path):
    _, first, _ = backed_up
    _flip_a_byte_in_every_pack(Path(engine.url))
    out = tmp_path / "out.raw"
    with pytest.raises(CorruptObjectError) as failed:
        engine.restore(first, out)
    assert "packs/" in failed.value.message and first in failed.value.message
    assert not out.exists()
    out.write_bytes(b"unchanged")
    with pytest.raises(CorruptObjectError):
        engine.restore(first, out, force=True)
    assert out.read_bytes() == b"unchanged"
    assert _leftovers(tmp_path) == []


def test_chunks_are_located_a_page_at_a_time_not_one_by_one(
    engine, backed_up, tmp_path, monkeypatch
):
    _, _, second = backed_up
    lookups: list[int] = []
    locate_many = IndexCache.locate_many

    def counted(self, chunk_ids):
        lookups.append(len(chunk_ids))
        return locate_many(self, chunk_ids)

    monkeypatch.setattr(IndexCache, "locate_many", counted)
    monkeypatch.setattr(IndexCache, "locate", lambda self, chunk_id: pytest.fail("one by one"))
    result = engine.restore(second, tmp_path / "out.raw")
    assert same(tmp_path / "out.raw", engine.references[second])
    assert lookups == [result.chunks_read]  # one lookup for this one-page snapshot


def test_the_restored_file_is_written_behind(engine, backed_up, tmp_path, monkeypatch):
    _, _, second = backed_up
    started: list[tuple[int, int]] = []
    written = WriteBehind.written

    def recorded(self, offset, length):
        started.append((offset, length))
        return written(self, offset, length)

    monkeypatch.setattr(WriteBehind, "written", recorded)
    result = engine.restore(second, tmp_path / "out.raw")
    assert same(tmp_path / "out.raw", engine.references[second])
    assert sum(length for _, length in started) == result.bytes_written > 0
