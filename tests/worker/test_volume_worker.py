"""The import worker's volume jobs: a blank volume committed with its job's id, a file (and the
loop device over it) grown and never shrunk, and an instant copy (reflink) that is made only
where the file system shares extents, with the guests of its source frozen for that instant."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from worker_support import job_file, run

from diskferry.disk.prime import recorded_job

sys.path.insert(0, str(Path(__file__).parent.parent / "qemu"))

from guest_agent import jailed_agent

MiB = 1 << 20


def test_a_blank_volume_is_sparse_and_carries_its_job(tmp_path: Path) -> None:
    target = tmp_path / "blank.img"
    job = {"kind": "blank", "jobId": "vd-1", "target": str(target), "size": 8 * MiB}
    finished = run("import", job_file(tmp_path, job))
    assert finished.code == 0, finished.stderr
    assert (finished.result["ok"], finished.result["size"]) == (True, 8 * MiB)
    assert target.stat().st_size == 8 * MiB and target.stat().st_blocks == 0
    assert recorded_job(str(target)) == "vd-1"


def test_a_grown_file_keeps_its_bytes_and_is_never_shrunk(tmp_path: Path) -> None:
    target = tmp_path / "disk.img"
    data = os.urandom(MiB)
    target.write_bytes(data)
    job = {"kind": "grow", "target": str(target), "size": 4 * MiB}
    finished = run("import", job_file(tmp_path, job))
    assert finished.code == 0, finished.stderr
    assert finished.result["size"] == 4 * MiB
    grown = target.read_bytes()
    assert grown[:MiB] == data and grown[MiB:] == bytes(3 * MiB)
    smaller = {"kind": "grow", "target": str(target), "size": MiB}
    kept = run("import", job_file(tmp_path, smaller))
    assert (kept.code, kept.result["size"]) == (0, 4 * MiB)
    assert target.stat().st_size == 4 * MiB


def test_a_loop_device_over_a_grown_file_takes_its_new_size(tmp_path: Path, loop_device) -> None:
    device = loop_device(2 * MiB)
    backing = tmp_path / "loop0.img"
    job = {"kind": "grow", "target": str(backing), "size": 6 * MiB, "device": device}
    finished = run("import", job_file(tmp_path, job))
    assert finished.code == 0, finished.stderr
    size = subprocess.run(
        ["blockdev", "--getsize64", device], capture_output=True, text=True, check=True
    )
    assert int(size.stdout) == 6 * MiB


def test_a_reflink_where_extents_cannot_be_shared_makes_nothing(tmp_path: Path, images) -> None:
    source, target = tmp_path / "source.img", tmp_path / "copy.img"
    source.write_bytes(os.urandom(MiB))
    job = {"kind": "reflink", "source": str(source), "target": str(target)}
    finished = run("import", job_file(tmp_path, job))
    assert finished.code == 0, finished.stderr
    assert (finished.result["cloned"], finished.result["frozen"]) == (False, 0)
    assert not target.exists() and images.leftovers(tmp_path) == []


def test_a_reflink_shares_the_source_grown_and_committed(reflink_dir: Path, images) -> None:
    source, target = reflink_dir / "source.img", reflink_dir / "copy.img"
    data = os.urandom(2 * MiB)
    source.write_bytes(data)
    job = {
        "kind": "reflink",
        "jobId": "vds-1",
        "source": str(source),
        "target": str(target),
        "size": 3 * MiB,
    }
    finished = run("import", job_file(reflink_dir, job))
    assert finished.code == 0, finished.stderr
    assert finished.result["cloned"] is True
    assert target.read_bytes() == data + bytes(MiB)
    assert recorded_job(str(target)) == "vds-1"
    assert images.leftovers(reflink_dir) == []


def test_a_reflink_freezes_the_guest_for_its_instant_and_thaws_it(
    reflink_dir: Path, tmp_path: Path
) -> None:
    source, target = reflink_dir / "source.img", reflink_dir / "copy.img"
    source.write_bytes(os.urandom(MiB))
    with jailed_agent(tmp_path) as agent:
        job = {
            "kind": "reflink",
            "source": str(source),
            "target": str(target),
            "freeze": [agent.socket],
        }
        finished = run("import", job_file(reflink_dir, job))
        assert agent.command("guest-fsfreeze-status") == "thawed"
    assert finished.code == 0, finished.stderr
    assert (finished.result["cloned"], finished.result["frozen"]) == (True, 1)
    assert "froze the guest" in finished.stderr and "thawed 1 guest" in finished.stderr
    assert target.read_bytes() == source.read_bytes()


def test_a_guest_that_will_not_freeze_leaves_no_copy(
    reflink_dir: Path, tmp_path: Path, images
) -> None:
    source, target = reflink_dir / "source.img", reflink_dir / "copy.img"
    source.write_bytes(os.urandom(MiB))
    with jailed_agent(tmp_path, blocked=("guest-fsfreeze-freeze",)) as agent:
        job = {"kind": "reflink", "source": str(source), "target": str(target)}
        refused = run("import", job_file(reflink_dir, {**job, "freeze": [agent.socket]}))
    with socket.socket(socket.AF_UNIX) as silent:  # a channel with no agent behind it
        silent.bind(str(tmp_path / "silent.sock"))
        silent.listen()
        job["freeze"], job["freezeTimeout"] = [str(tmp_path / "silent.sock")], 1
        unanswered = run("import", job_file(reflink_dir, job))
    for finished in (refused, unanswered):
        assert finished.code == 1
        assert finished.result["reason"] == "GuestNotFrozen"
        finished.assert_one_log_line_of_failure()
    assert not target.exists() and images.leftovers(reflink_dir) == []
