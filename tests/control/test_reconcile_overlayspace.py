"""The room a backup's overlays need beside its disks: enough is nothing to say, too little
names the place and both amounts."""

from __future__ import annotations

from diskferry.control.reconcilers.vms.overlayspace import METADATA, DiskRoom, needed, shortfall


def test_a_running_vm_needs_room_for_fleecing(tmp_path):
    assert needed(1 << 30, running=True) > needed(1 << 30, running=False) >= METADATA


def test_enough_room_says_nothing(tmp_path):
    assert shortfall([DiskRoom(str(tmp_path / "disk.img"), 1 << 20)], running=True) is None


def test_too_little_room_says_where_and_how_much(tmp_path):
    huge = DiskRoom(str(tmp_path / "disk.img"), 1 << 62)
    message = shortfall([huge], running=True)
    assert message is not None
    assert str(tmp_path) in message and "free" in message and "need" in message
