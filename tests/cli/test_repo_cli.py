"""`diskferry repo init|check|stats`, `snapshots`, `forget` and `prune`, run as the real command."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "objstore"))

from s3server import ACCESS_KEY, SECRET_KEY, make_bucket, running_moto

from diskferry.backup.entries import Entry, full_entries
from diskferry.backup.packs import pack_path
from diskferry.backup.repository import Repository
from diskferry.backup.snapshots import SnapshotInfo, new_snapshot_id

PASSWORD = "cli password"


def run(env, *args):
    exe = Path(sys.executable).with_name("diskferry")
    proc = subprocess.run(
        [str(exe), *map(str, args)], capture_output=True, text=True, env=env, timeout=120
    )
    return proc


def error_line(proc):
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("diskferry: error: ")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def env(tmp_path):
    return {
        **os.environ,
        "DISKFERRY_PASSWORD": PASSWORD,
        "DISKFERRY_CACHE_DIR": str(tmp_path / "cache"),
    }


def add_snapshot(url, vm, when, data, s3=None):
    """Store one snapshot of a disk made of `data` through the library."""
    with Repository.open(url, PASSWORD, s3=s3) as repo:
        with repo.pack_writer() as writer:
            cid = writer.add(data)
        info = SnapshotInfo(
            id=new_snapshot_id(),
            vm=vm,
            disk="root",
            backup="b-" + vm,
            disk_size=2 * len(data),
            chunk_size=repo.config.chunk_size,
            type="full",
            reason="no tracker",
            started=when,
            finished=when,
        )
        with repo.new_snapshot(info.path) as manifest:
            manifest.write(full_entries([Entry(0, len(data), cid, 0)], info.disk_size))
            repo.save_snapshot(manifest, info)
        return info, pack_path(repo.index.locate(cid).pack)


def test_init_stats_check_on_a_directory(tmp_path, env):
    url = tmp_path / "repo"
    made = run(env, "repo", "init", "--repo", url, "--chunk-size", "64K", "--json")
    assert made.returncode == 0, made.stderr
    result = json.loads(made.stdout)
    assert result["chunkSize"] == 65536 and result["encrypted"] is True
    again = run(env, "repo", "init", "--repo", url)
    assert again.returncode == 1
    assert "already exists" in error_line(again)

    info, pack = add_snapshot(str(url), "vm1", "2026-01-02T00:00:00Z", os.urandom(50_000))
    stats = json.loads(run(env, "repo", "stats", "--repo", url, "--json").stdout)
    assert stats["snapshots"] == 1 and stats["chunks"] == 1 and stats["packs"] == 1
    checked = run(env, "repo", "check", "--repo", url, "--read-data", "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["ok"] is True

    blob = bytearray((url / pack).read_bytes())
    blob[100] ^= 1
    (url / pack).write_bytes(bytes(blob))
    assert run(env, "repo", "check", "--repo", url).returncode == 0
    damaged = run(env, "repo", "check", "--repo", url, "--read-data")
    assert damaged.returncode == 1
    line = error_line(damaged)
    assert pack in line and f"vm1/root/{info.id}" in line


def test_check_reports_every_foreign_name_and_exits_1(tmp_path, env):
    url = tmp_path / "repo"
    assert run(env, "repo", "init", "--repo", url).returncode == 0
    add_snapshot(str(url), "vm1", "2026-01-02T00:00:00Z", os.urandom(50_000))
    strays = ["index/" + "0" * 31, "packs/notes.txt", "snapshots/vm1/root/not a snapshot"]
    for name in strays:
        (url / name).parent.mkdir(parents=True, exist_ok=True)
        (url / name).write_bytes(b"someone else's file")
    checked = run(env, "repo", "check", "--repo", url)
    assert checked.returncode == 1
    told = [ln for ln in checked.stderr.splitlines() if "is not an object this repository" in ln]
    assert [name for name in strays for ln in told if f"{url}: {name} is not" in ln] == strays
    line = error_line(checked)
    assert all(name in line for name in strays)
    as_json = run(env, "repo", "check", "--repo", url, "--json")
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["snapshots"] == 1 and report["chunks"] == 1
    assert sorted(p["object"] for p in report["problems"]) == strays
    assert all((url / name).exists() for name in strays)


def test_wrong_password_and_no_repository(tmp_path, env):
    url = tmp_path / "repo"
    assert run(env, "repo", "init", "--repo", url).returncode == 0
    wrong = run({**env, "DISKFERRY_PASSWORD": "nope"}, "repo", "stats", "--repo", url)
    assert wrong.returncode == 1
    assert error_line(wrong) == f"diskferry: error: wrong password for repository {url}"
    password_file = tmp_path / "pw"
    password_file.write_text(PASSWORD + "\n")
    no_env = {k: v for k, v in env.items() if k != "DISKFERRY_PASSWORD"}
    ok = run(no_env, "repo", "stats", "--repo", url, "--password-file", password_file)
    assert ok.returncode == 0, ok.stderr
    missing = run(env, "repo", "check", "--repo", tmp_path / "nothing")
    assert "no repository at" in error_line(missing)
    assert not (tmp_path / "nothing").exists()
    bad = run(env, "repo", "init", "--repo", tmp_path / "r2", "--chunk-size", "1000")
    assert bad.returncode == 2


def test_unencrypted_repository(tmp_path, env):
    url = tmp_path / "plain"
    no_env = {k: v for k, v in env.items() if k != "DISKFERRY_PASSWORD"}
    made = run(no_env, "repo", "init", "--repo", url, "--no-encryption", "--json")
    assert json.loads(made.stdout)["encrypted"] is False
    assert run(no_env, "repo", "check", "--repo", url).returncode == 0


def test_snapshots_forget_prune_on_s3(tmp_path, env):
    with running_moto() as endpoint:
        make_bucket(endpoint, "clibucket")
        url = f"s3://clibucket/{uuid.uuid4().hex}"
        env = {
            **env,
            "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        }
        s3 = ["--s3-endpoint", endpoint, "--s3-region", "us-east-1"]
        made = run(env, "repo", "init", "--repo", url, "--max-incrementals", "5", *s3)
        assert made.returncode == 0, made.stderr
        from diskferry.objstore.store import S3Options

        opts = S3Options(endpoint, "us-east-1", ACCESS_KEY, SECRET_KEY)
        keep, _ = add_snapshot(url, "vm1", "2026-01-02T00:00:00Z", b"k" * 70_000, opts)
        old, _ = add_snapshot(url, "vm1", "2026-01-01T00:00:00Z", os.urandom(70_000), opts)
        other, _ = add_snapshot(url, "vm2", "2026-01-03T00:00:00Z", b"o" * 70_000, opts)

        listed = json.loads(run(env, "snapshots", "--repo", url, "--json", *s3).stdout)
        assert [s["id"] for s in listed] == [old.id, keep.id, other.id]
        assert set(listed[0]) >= {
            "id",
            "backup",
            "vm",
            "disk",
            "time",
            "type",
            "reason",
            "parent",
            "size",
            "checkpoint",
        }
        assert listed[0]["time"] == "2026-01-01T00:00:00Z" and listed[0]["type"] == "full"
        only = json.loads(run(env, "snapshots", "--repo", url, "--vm", "vm2", "--json", *s3).stdout)
        assert [s["id"] for s in only] == [other.id]

        forgot = run(env, "forget", "--repo", url, "--keep-last", "1", "--vm", "vm1", "--json", *s3)
        assert forgot.returncode == 0, forgot.stderr
        assert json.loads(forgot.stdout)["forgotten"] == [f"vm1/root/{old.id}"]
        pruned = run(env, "prune", "--repo", url, "--json", *s3)
        assert pruned.returncode == 0, pruned.stderr
        assert json.loads(pruned.stdout)["chunksRemoved"] == 1
        checked = run(env, "repo", "check", "--repo", url, "--read-data", "--json", *s3)
        report = json.loads(checked.stdout)
        assert report["ok"] and report["snapshots"] == 2 and report["chunks"] == 2
        gone = run(env, "forget", "--repo", url, "0000", *s3)
        assert gone.returncode == 1 and "no snapshot 0000" in error_line(gone)


HOLDER = """
import sys, time
from diskferry.backup.locks import acquire
from diskferry.objstore.store import ObjectStore
with acquire(ObjectStore(sys.argv[1]), "shared", "restore"):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_prune_refuses_or_waits_for_a_lock(tmp_path, env):
    url = tmp_path / "repo"
    assert run(env, "repo", "init", "--repo", url).returncode == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(url)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = run(env, "prune", "--repo", url)
        assert refused.returncode == 1
        assert f"locked by restore (pid {holder.pid} on " in error_line(refused)
        exe = Path(sys.executable).with_name("diskferry")
        waiting = subprocess.Popen(
            [str(exe), "prune", "--repo", str(url), "--wait", "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert waiting.stderr.readline().startswith("diskferry: waiting: ")
        holder.stdin.write("go\n")
        holder.stdin.flush()
        out, _ = waiting.communicate(timeout=60)
        assert waiting.returncode == 0
        assert json.loads(out)["chunksRemoved"] == 0
    finally:
        holder.kill()
        holder.wait()


def _two_snapshots_in_one_pack(url):
    """Two snapshots whose chunks (10 000 and 50 000 random bytes) share one pack."""
    small, large = os.urandom(10_000), os.urandom(50_000)
    with Repository.open(url, PASSWORD) as repo:
        with repo.pack_writer() as writer:
            ids = [writer.add(small), writer.add(large)]
        infos = []
        for n, (cid, data) in enumerate(zip(ids, (small, large), strict=True)):
            when = f"2026-01-0{n + 1}T00:00:00Z"
            info = SnapshotInfo(
                id=new_snapshot_id(),
                vm="vm1",
                disk="root",
                backup=f"b{n}",
                disk_size=len(data),
                chunk_size=repo.config.chunk_size,
                type="full",
                reason="no tracker",
                started=when,
                finished=when,
            )
            with repo.new_snapshot(info.path) as manifest:
                manifest.write(full_entries([Entry(0, len(data), cid, 0)], info.disk_size))
                repo.save_snapshot(manifest, info)
            infos.append(info)
        assert repo.index.locate(ids[0]).pack == repo.index.locate(ids[1]).pack
        return infos


def test_unused_bytes_are_reported_and_repack_all_reclaims_them(tmp_path, env):
    url = tmp_path / "repo"
    assert run(env, "repo", "init", "--repo", url).returncode == 0
    first, _ = _two_snapshots_in_one_pack(str(url))
    assert run(env, "forget", "--repo", url, first.id).returncode == 0

    pruned = run(env, "prune", "--repo", url)
    assert pruned.returncode == 0, pruned.stderr
    assert "repacked 0" in pruned.stderr
    assert "unused in 1 pack (--repack-all reclaims it)" in pruned.stderr
    stats = json.loads(run(env, "repo", "stats", "--repo", url, "--json").stdout)
    assert stats["packsWithUnused"] == 1 and stats["unusedBytes"] >= 10_000
    human = run(env, "repo", "stats", "--repo", url).stdout
    assert "packsWithUnused: 1" in human and "unusedBytes: " in human and "KiB" in human
    checked = run(env, "repo", "check", "--repo", url, "--json")
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert report["packsWithUnused"] == 1 and report["unusedBytes"] == stats["unusedBytes"]
    assert "unused in 1 pack" in run(env, "repo", "check", "--repo", url).stderr

    reclaimed = run(env, "prune", "--repo", url, "--repack-all", "--json")
    assert reclaimed.returncode == 0, reclaimed.stderr
    result = json.loads(reclaimed.stdout)
    assert result["packsRepacked"] == 1 and result["chunksRemoved"] == 1
    assert result["unusedBytes"] == 0 and result["bytesFreed"] > 0
    stats = json.loads(run(env, "repo", "stats", "--repo", url, "--json").stdout)
    assert stats["unusedBytes"] == 0 and stats["packsWithUnused"] == 0
    assert run(env, "repo", "check", "--repo", url, "--read-data").returncode == 0
