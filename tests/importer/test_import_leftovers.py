"""What a killed import or restore left beside its target goes at the next one; what a live
one holds stays."""

from __future__ import annotations

import fcntl
import os

from diskferry.disk.prime import Target


def test_an_import_removes_the_files_a_killed_one_left(diskferry, images, tmp_path):
    target = tmp_path / "disk.raw"
    left = [tmp_path / "disk.raw.prime-0badf00d", tmp_path / "disk.raw.scratch-0badf00d"]
    for path in left:
        path.write_bytes(b"x" * 4096)
    live = tmp_path / "disk.raw.prime-11ve11ve"
    live.write_bytes(b"in use")
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = diskferry("import", images.get("qcow2"), target, "--no-progress")
        assert result.code == 0, result.stderr
        assert not any(p.exists() for p in left)
        assert live.read_bytes() == b"in use"
    assert images.same(images.reference, target)


def test_a_claimed_target_holds_its_files_until_discarded(tmp_path):
    first, second = Target(str(tmp_path / "t.raw")), Target(str(tmp_path / "t.raw"))
    first.claim()
    second.claim()
    assert os.path.exists(first.prime) and os.path.exists(first.scratch)
    second.discard()
    assert not os.path.exists(second.prime)
    assert os.path.exists(first.prime) and os.path.exists(first.scratch)
    first.discard()
    assert os.listdir(tmp_path) == []
