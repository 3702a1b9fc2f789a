"""The backup worker's `chores` job: a control plane's repository chores on one opening of the
repository (made when absent and asked): snapshot sizes, metadata read (into the job's output
file), listed and stored with the trackers it asks for, snapshots forgotten with the metadata
describing them, a prune."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from worker_support import Finished, job_file, run, start

from diskferry.backup import ChoresResult, MetadataRead
from diskferry.backup.metadata import list_metadata, load_metadata, save_metadata
from diskferry.backup.repository import Repository

PASSWORD = "chores password"
MiB = 1 << 20


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The password in a variable the jobs name."""
    base = {k: v for k, v in os.environ.items() if k != "DISKFERRY_PASSWORD"}
    return {**base, "CHORES_SECRET": PASSWORD, "DISKFERRY_CACHE_DIR": str(tmp_path / "cache")}


@pytest.fixture
def repo(tmp_path: Path) -> str:
    return str(tmp_path / "repo")


def _run(tmp_path: Path, env: dict[str, str], repo: str, kind: str, **fields: Any) -> Finished:
    job = {"kind": kind, "repo": repo, "passwordEnv": "CHORES_SECRET", **fields}
    return run("backup", job_file(tmp_path, job, f"{kind}.json"), env)


def _chores(tmp_path: Path, env: dict[str, str], repo: str, **fields: Any) -> ChoresResult:
    finished = _run(tmp_path, env, repo, "chores", **fields)
    assert finished.code == 0, finished.stderr
    return ChoresResult.model_validate(finished.result)


def _backup(tmp_path: Path, env: dict[str, str], repo: str, vm: str, size: int) -> str:
    """A backup of a `size`-byte disk of `vm` with fresh data; its snapshot id."""
    volume = tmp_path / f"{vm}-{size}.raw"
    with open(volume, "wb") as f:
        f.truncate(size)
        f.write(os.urandom(MiB))
    finished = _run(
        tmp_path, env, repo, "backup", vm=vm, disks=[{"name": "d", "path": str(volume)}]
    )
    assert finished.code == 0, finished.stderr
    return finished.result["disks"][0]["snapshot"]


def test_a_repository_is_made_only_when_asked_and_opened_after(tmp_path, env, repo) -> None:
    absent = _run(tmp_path, env, repo, "chores", chores={})
    assert absent.code == 1 and absent.result["reason"] == "RepositoryNotFound"
    made = _chores(tmp_path, env, repo, create=True, chores={})
    assert made.created and made.encrypted
    opened = _chores(tmp_path, env, repo, create=True, chores={})
    assert not opened.created and opened.repository == made.repository


def test_metadata_is_stored_with_trackers_read_and_listed(tmp_path, env, repo) -> None:
    _chores(tmp_path, env, repo, create=True, chores={})
    snapshot = _backup(tmp_path, env, repo, "ns.vm", 8 * MiB)
    with Repository.open(repo, PASSWORD) as opened:
        save_metadata(opened, "ns.known", {"old": True})
        tracker = opened.load_tracker("ns.vm").model_dump(mode="json")
    document = {"kind": "BackupMetadata", "status": {"phase": "Completed"}}
    store = {"name": "ns.b1", "document": document, "trackers": ["ns.vm", "ns.none"]}
    stored = _chores(tmp_path, env, repo, chores={"sizes": [snapshot], "store": store})
    assert stored.sizes == {snapshot: 8 * MiB} and not stored.read
    with Repository.open(repo, PASSWORD) as opened:
        kept = load_metadata(opened, "ns.b1")
    assert kept == {**document, "trackers": {"ns.vm": tracker, "ns.none": None}}

    listing = {"prefix": "ns.", "known": ["ns.known"]}
    chores = {"read": ["ns.gone"], "listing": listing}
    unwritten = _run(tmp_path, env, repo, "chores", chores=chores)
    assert unwritten.code == 2 and "need an output file" in unwritten.result["message"]
    assert _chores(tmp_path, env, repo, chores=chores, output="read.json").read
    output = tmp_path / "read.json"
    assert output.stat().st_mode & 0o777 == 0o600
    read = MetadataRead.model_validate_json(output.read_bytes())
    assert read.names == ["ns.b1", "ns.known"]
    assert read.documents == {"ns.gone": None, "ns.b1": kept}


def test_snapshots_go_with_the_metadata_of_those_forgotten_then_a_prune(
    tmp_path, env, repo
) -> None:
    _chores(tmp_path, env, repo, create=True, chores={})
    first = _backup(tmp_path, env, repo, "ns.vm", 4 * MiB)
    second = _backup(tmp_path, env, repo, "ns.vm", 4 * MiB)
    with Repository.open(repo, PASSWORD) as opened:
        for name in ("ns.b1", "ns.b2", "ns.other"):
            save_metadata(opened, name, {"name": name})
    forget = {
        "snapshots": [first, second],
        "keep": {"keepLast": 1},
        "metadata": {"ns.b1": [first], "ns.b2": [second]},
    }
    done = _chores(tmp_path, env, repo, chores={"forget": forget, "prune": "ifForgotten"})
    assert (done.forgotten, done.deleted_metadata) == ([first], ["ns.b1"])
    assert done.pruned is not None and done.pruned.packs_deleted >= 1
    again = {"snapshots": [first], "metadata": {"ns.other": []}}
    quiet = _chores(tmp_path, env, repo, chores={"forget": again, "prune": "ifForgotten"})
    assert (quiet.forgotten, quiet.deleted_metadata, quiet.pruned) == ([], ["ns.other"], None)
    with Repository.open(repo, PASSWORD) as opened:
        assert [s.id for s in opened.list_snapshots()] == [second]
        assert list_metadata(opened) == ["ns.b2"]


def test_chores_given_later_run_on_the_repository_opened_before(tmp_path, env, repo) -> None:
    _chores(tmp_path, env, repo, create=True, chores={})
    job = {"kind": "chores", "repo": repo, "passwordEnv": "CHORES_SECRET"}
    job["choresFile"] = "later.json"
    running = start("backup", job_file(tmp_path, job), env)
    running.wait_for(lambda state: state["phase"] == "Opening")
    assert running.proc.poll() is None
    store = {"name": "ns.late", "document": {"late": True}}
    (tmp_path / "later.json").write_text(json.dumps({"store": store}))
    finished = running.finish()
    assert finished.code == 0, finished.stderr
    with Repository.open(repo, PASSWORD) as opened:
        assert load_metadata(opened, "ns.late") == {"late": True}


def test_chores_that_never_come_end_with_a_cancel(tmp_path, env, repo) -> None:
    _chores(tmp_path, env, repo, create=True, chores={})
    job = {"kind": "chores", "repo": repo, "passwordEnv": "CHORES_SECRET", "choresFile": "x"}
    running = start("backup", job_file(tmp_path, job), env)
    finished = running.finish(signal.SIGTERM)
    assert finished.code == 1 and finished.result["reason"] == "Cancelled"


def test_a_job_gives_its_chores_or_their_file_not_both(tmp_path, env, repo) -> None:
    neither = _run(tmp_path, env, repo, "chores")
    both = _run(tmp_path, env, repo, "chores", chores={}, choresFile="x")
    assert (neither.code, both.code) == (2, 2)
    assert "give the chores, or the file they come in" in neither.result["message"]
