"""One backup of a VM at a time: a second one refuses, or waits with --wait."""

import threading

import pytest
from backup_support import PASSWORD, engine_fixture, make_disk  # noqa: F401

from diskferry.backup.errors import LockedError
from diskferry.backup.repository import Repository


def test_a_second_backup_of_a_vm_refuses_or_waits(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    other = make_disk(tmp_path / "other.raw")
    with Repository.open(engine.url, PASSWORD) as repo:
        running = repo.lock("vm", "backup", vm="vm")  # what a running backup of "vm" holds
        with pytest.raises(LockedError, match="locked by backup of VM vm") as refused:
            engine.backup(disks={"d": volume})
        assert "--wait" in refused.value.message
        assert engine.backup("another-vm", {"d": other}).disks[0].type == "full"

        done: list[str] = []
        waiting = threading.Thread(
            target=lambda: done.append(engine.backup(disks={"d": volume}, wait=True).backup)
        )
        waiting.start()
        waiting.join(1.5)
        assert waiting.is_alive() and not done
        running.release()
        waiting.join(30)
    assert len(done) == 1
    with Repository.open(engine.url, PASSWORD) as repo:
        assert [s.backup for s in repo.list_snapshots("vm")] == done
        assert list(repo.store.list("locks/")) == []
