"""A full and an incremental backup on a directory and on S3 (moto), and their restores."""

from backup_support import PASSWORD, Engine, MiB, make_disk, write


def test_full_incremental_and_restore(repo_url, new_repo, tmp_path, monkeypatch):
    new_repo(repo_url, chunk_size=MiB)
    monkeypatch.setenv("DISKFERRY_PASSWORD", PASSWORD)
    engine = Engine(repo_url, tmp_path)
    volume = make_disk(tmp_path / "disk.raw")
    first = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(first.snapshot, volume)
    write(volume + ".cbt.qcow2", 7 * MiB, 3 * 4096, 0x17)
    second = engine.backup(disks={"d": volume}).disks[0]
    engine.keep(second.snapshot, volume)
    assert (first.type, second.type) == ("full", "incremental")
    assert second.bytes_read == 64 * 1024
    for snapshot in (first.snapshot, second.snapshot):
        assert engine.restores_exactly(snapshot)
