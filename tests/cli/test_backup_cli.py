"""`diskferry backup`, `restore` and `chain reset` as the real command."""

import json
import os
import subprocess
from pathlib import Path

import pytest

PASSWORD = "cli password"
MiB = 1 << 20


@pytest.fixture
def env(diskferry, tmp_path):
    """The CLI's environment: a password and a cache of its own."""
    diskferry.env.update(DISKFERRY_PASSWORD=PASSWORD, DISKFERRY_CACHE_DIR=str(tmp_path / "cache"))
    return diskferry


@pytest.fixture
def repo(env, tmp_path) -> str:
    url = str(tmp_path / "repo")
    made = env("repo", "init", "--repo", url, "--json")
    assert made.code == 0, made.stderr
    return url


def _volume(path: Path) -> str:
    with open(path, "wb") as f:
        f.truncate(32 * MiB)
        f.seek(3 * MiB)
        f.write(os.urandom(2 * MiB))
    return str(path)


def _qemu_write(overlay: str, offset: int, length: int, pattern: int) -> None:
    cmd = f"write -P {pattern} {offset} {length}"
    subprocess.run(["qemu-io", "-f", "qcow2", "-c", cmd, overlay], check=True, capture_output=True)


def _same(a, b) -> bool:
    return subprocess.run(["qemu-img", "compare", "-q", str(a), str(b)]).returncode == 0


def test_backup_restore_and_chain_reset_end_to_end(env, repo, tmp_path):
    volume = _volume(tmp_path / "disk.raw")
    assert env("cbt", "enable", volume).code == 0
    backup = ("backup", "--repo", repo, "--vm", "web", "--disk", f"root={volume}", "--json")
    first = env(*backup, "--tag", "nightly")
    assert first.code == 0, first.stderr
    out = json.loads(first.stdout)
    assert set(out) >= {"backup", "consistency", "disks"}
    assert out["consistency"] == "crash-consistent"
    assert "crash-consistent" in first.stderr
    (disk,) = out["disks"]
    assert {
        "snapshot",
        "type",
        "reason",
        "bytesRead",
        "bytesNew",
        "bytesUploaded",
        "seconds",
    } <= set(disk)
    assert (disk["type"], disk["reason"]) == ("full", "no earlier backup of this disk")
    reference = tmp_path / "ref.raw"
    reference.write_bytes(Path(volume).read_bytes())

    _qemu_write(volume + ".cbt.qcow2", 4 * MiB, 4096, 0x21)
    second = env(*backup)
    assert second.code == 0, second.stderr
    (disk2,) = json.loads(second.stdout)["disks"]
    assert disk2["type"] == "incremental" and disk2["bytesRead"] == 64 * 1024

    listed = json.loads(env("snapshots", "--repo", repo, "--json").stdout)
    assert [s["id"] for s in listed] == [disk["snapshot"], disk2["snapshot"]]
    assert listed[0]["tags"] == ["nightly"]

    target = tmp_path / "restored.raw"
    restore = ("restore", "--repo", repo, disk["snapshot"], target, "--json")
    done = env(*restore)
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["snapshot"] == disk["snapshot"]
    assert _same(target, reference)
    refused = env(*restore)
    assert refused.code == 1 and "--force" in refused.error
    latest = env("restore", "latest", target, "--repo", repo, "--vm", "web", "--disk", "root")
    assert latest.code == 1
    latest = env(
        "restore", "latest", target, "--repo", repo, "--vm", "web", "--disk", "root", "--force"
    )
    assert latest.code == 0, latest.stderr
    assert _same(target, volume)

    reset = env("chain", "reset", "--repo", repo, "--vm", "web", "--json")
    assert json.loads(reset.stdout) == {"vm": "web", "disks": ["root"]}
    third = env(*backup)
    assert json.loads(third.stdout)["disks"][0]["type"] == "full"


def test_a_volume_without_cbt_says_so(env, repo, tmp_path):
    volume = _volume(tmp_path / "plain.raw")
    result = env("backup", "--repo", repo, "--vm", "v", "--disk", f"d={volume}", "--no-progress")
    assert result.code == 0, result.stderr
    assert "CBT is off" in result.stderr and f"diskferry cbt enable {volume}" in result.stderr


def test_usage_errors_and_missing_disks(env, repo, tmp_path):
    bad = env("backup", "--repo", repo, "--vm", "v", "--disk", "no-equals-sign")
    assert bad.code == 2 and "NAME=PATH" in bad.error
    missing = env("backup", "--repo", repo, "--vm", "v", "--disk", f"d={tmp_path / 'nope.raw'}")
    assert missing.code == 1 and "does not exist" in missing.error
    fmt = env("restore", "x", tmp_path / "t", "--repo", repo, "--format", "vmdk")
    assert fmt.code == 2


def test_snapshots_by_the_backup_id_printed_and_by_tag(env, repo, tmp_path):
    volumes = [_volume(tmp_path / f"disk{n}.raw") for n in (1, 2)]
    disks = [f"--disk=root={volumes[0]}", f"--disk=data-with-a-long-name={volumes[1]}"]
    backup = ("backup", "--repo", repo, "--vm", "a-virtual-machine-with-a-long-name", *disks)
    first = env(*backup, "--tag", "nightly", "--tag", "keep")
    assert first.code == 0, first.stderr
    printed = first.stderr.strip().splitlines()[-1]
    assert printed.startswith("diskferry: backup ") and printed.endswith(" done")
    backup_id = printed.split()[2]
    assert "read 2.0 MiB, 2.0 MiB new" in first.stderr
    assert env(*backup).code == 0

    by_backup = json.loads(env("snapshots", "--repo", repo, "--backup", backup_id, "--json").stdout)
    assert len(by_backup) == 2 and {s["backup"] for s in by_backup} == {backup_id}
    tagged = json.loads(env("snapshots", "--repo", repo, "--tag", "nightly", "--json").stdout)
    assert [s["id"] for s in tagged] == [s["id"] for s in by_backup]
    both = ("snapshots", "--repo", repo, "--tag", "nightly", "--tag", "other", "--json")
    assert json.loads(env(*both).stdout) == []

    table = env("snapshots", "--repo", repo).stdout.splitlines()
    assert len(table) == 5
    assert all(len(line) <= 80 for line in table), table
    assert all("32.0 MiB" in line for line in table[1:])
    assert table[1].endswith(" nightly,…") and "a-virtual-machine-w…" in table[1]
