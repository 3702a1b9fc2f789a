"""The backup worker: backup, restore and the repository operations as jobs of one worker, the
job's id in what each produces, and secrets that come only from files and the environment."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from worker_support import Finished, job_file, run

from diskferry.backup.repository import Repository
from diskferry.disk.prime import recorded_job

PASSWORD = "worker password"
MiB = 1 << 20


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The password in a variable the jobs name, not in DISKFERRY_PASSWORD."""
    base = {k: v for k, v in os.environ.items() if k != "DISKFERRY_PASSWORD"}
    return {**base, "BACKUP_SECRET": PASSWORD, "DISKFERRY_CACHE_DIR": str(tmp_path / "cache")}


@pytest.fixture
def repo(tmp_path: Path) -> str:
    return str(tmp_path / "repo")


def _job(tmp_path: Path, env: dict[str, str], repo: str, kind: str, **fields: Any) -> Finished:
    job = {"kind": kind, "repo": repo, "passwordEnv": "BACKUP_SECRET", **fields}
    finished = run("backup", job_file(tmp_path, job, f"{kind}.json"), env)
    assert "Traceback" not in finished.stderr
    return finished


def _cbt(tmp_path: Path, kind: str, volume: str) -> Finished:
    return run("backup", job_file(tmp_path, {"kind": kind, "volume": volume}, f"{kind}.json"))


def _ok(finished: Finished, job_id: str | None = None) -> dict[str, Any]:
    assert finished.code == 0, finished.stderr
    result = finished.result
    assert (result["ok"], result["jobId"]) == (True, job_id)
    return result


def _volume(path: Path) -> str:
    with open(path, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(3 * MiB)
        f.write(os.urandom(2 * MiB))
    return str(path)


def test_backups_and_restores_carry_their_job_ids(tmp_path, env, repo) -> None:
    made = _ok(_job(tmp_path, env, repo, "init", jobId="init-1", chunkSize=65536), "init-1")
    assert (made["chunkSize"], made["encrypted"]) == (65536, True)
    volume = _volume(tmp_path / "disk.raw")
    disks = [{"name": "d", "path": volume}]
    first = _ok(_job(tmp_path, env, repo, "backup", jobId="b-1", vm="vm", disks=disks), "b-1")
    _ok(_job(tmp_path, env, repo, "backup", jobId="b-2", vm="vm", disks=disks), "b-2")
    with Repository.open(repo, PASSWORD) as opened:
        found = opened.list_snapshots()
    assert [s.job for s in found] == ["b-1", "b-2"]

    target = tmp_path / "restored.raw"
    snapshot = first["disks"][0]["snapshot"]
    restored = _job(
        tmp_path, env, repo, "restore", jobId="r-1", snapshot=snapshot, target=str(target)
    )
    assert _ok(restored, "r-1")["snapshot"] == snapshot
    assert target.read_bytes() == Path(volume).read_bytes()
    assert recorded_job(str(target)) == "r-1"


def test_repository_operations_as_jobs(tmp_path, env, repo) -> None:
    _ok(_job(tmp_path, env, repo, "init"))
    volume = _volume(tmp_path / "disk.raw")
    enabled = _ok(_cbt(tmp_path, "cbtEnable", volume))
    assert enabled["overlay"] == volume + ".cbt.qcow2" and Path(enabled["overlay"]).exists()
    disks = [{"name": "d", "path": volume}]
    first = _ok(_job(tmp_path, env, repo, "backup", vm="vm", disks=disks))
    second = _ok(_job(tmp_path, env, repo, "backup", vm="vm", disks=disks))
    assert second["disks"][0]["type"] == "incremental"

    reset = _ok(_job(tmp_path, env, repo, "chainReset", vm="vm"))
    assert reset["disks"] == ["d"]
    third = _ok(_job(tmp_path, env, repo, "backup", vm="vm", disks=disks))
    assert third["disks"][0]["type"] == "full"

    forgot = _ok(_job(tmp_path, env, repo, "forget", keepLast=1))
    kept = third["disks"][0]["snapshot"]
    assert forgot["forgotten"] == [f"vm/d/{r['disks'][0]['snapshot']}" for r in (first, second)]
    _ok(_job(tmp_path, env, repo, "prune"))
    checked = _ok(_job(tmp_path, env, repo, "check", readData=True))
    assert (checked["snapshots"], checked["problems"]) == (1, [])
    with Repository.open(repo, PASSWORD) as opened:
        assert [s.id for s in opened.list_snapshots()] == [kept]

    disabled = _ok(_cbt(tmp_path, "cbtDisable", volume))
    assert (disabled["enabled"], Path(volume + ".cbt.qcow2").exists()) == (False, False)


def test_a_damaged_repository_fails_its_check_job(tmp_path, env, repo) -> None:
    _ok(_job(tmp_path, env, repo, "init"))
    disks = [{"name": "d", "path": _volume(tmp_path / "disk.raw")}]
    _ok(_job(tmp_path, env, repo, "backup", vm="vm", disks=disks))
    pack = next(p for p in Path(repo, "packs").rglob("*") if p.is_file())
    blob = bytearray(pack.read_bytes())
    blob[100] ^= 1
    pack.write_bytes(bytes(blob))
    finished = _job(tmp_path, env, repo, "check", jobId="c-1", readData=True)
    assert finished.code == 1
    result = finished.result
    assert (result["reason"], result["jobId"]) == ("CheckFailed", "c-1")
    assert pack.name in result["message"]
    assert "WARNING Damaged:" in finished.stderr


def test_the_password_comes_from_a_file_or_a_variable_only(tmp_path, env, repo) -> None:
    _ok(_job(tmp_path, env, repo, "init"))
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    job = {"kind": "check", "repo": repo, "passwordFile": str(password_file)}
    _ok(run("backup", job_file(tmp_path, job), env))
    no_password = run("backup", job_file(tmp_path, {"kind": "check", "repo": repo}), env)
    assert no_password.code == 1 and no_password.result["reason"] == "WrongPassword"
    inline = run("backup", job_file(tmp_path, {"kind": "check", "repo": repo, "password": "x"}))
    assert inline.code == 2 and inline.result["reason"] == "BadJob"
