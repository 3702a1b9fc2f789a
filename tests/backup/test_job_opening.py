"""A job's repository opened ahead, in a thread: the same repository, the same errors."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from diskferry.backup.config import KdfParams
from diskferry.backup.errors import PasswordError
from diskferry.backup.job import RepoAccess
from diskferry.backup.repository import Repository
from diskferry.backup.worker import KINDS
from diskferry.base.errors import DiskferryError
from diskferry.disk.progress import Progress
from diskferry.worker.reporter import QUIET
from diskferry.worker.runtime import JobContext

PASSWORD = "opening-ahead"


@pytest.fixture
def repo_url(tmp_path: Path) -> str:
    url = str(tmp_path / "repo")
    Repository.init(url, PASSWORD, kdf=KdfParams(n=1 << 10, r=8, p=1)).close()
    return url


@pytest.fixture
def opened_in(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that opened a repository, in order."""
    threads: list[str] = []
    real_open = Repository.open

    def recording_open(*args: object, **kwargs: object) -> Repository:
        threads.append(threading.current_thread().name)
        return real_open(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Repository, "open", recording_open)
    return threads


def _access(url: str, tmp_path: Path, password: str) -> RepoAccess:
    secret = tmp_path / "password"
    secret.write_text(password + "\n")
    return RepoAccess(repo=url, passwordFile=str(secret))


def test_the_opening_runs_in_its_own_thread_and_is_taken_once(
    repo_url: str, tmp_path: Path, opened_in: list[str]
) -> None:
    access = _access(repo_url, tmp_path, PASSWORD)
    access.start_opening()
    with access.open_repository() as ahead, access.open_repository() as again:
        assert ahead is not again
        assert ahead.id == again.id
    assert opened_in == ["repository-open", threading.current_thread().name]


def test_a_wrong_password_fails_where_the_repository_is_taken(
    repo_url: str, tmp_path: Path
) -> None:
    access = _access(repo_url, tmp_path, "not-it")
    access.start_opening()
    with pytest.raises(PasswordError, match="wrong password"):
        access.open_repository()


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("backup", {"vm": "vm", "disks": [{"name": "d", "path": "no-such-volume.raw"}]}),
        ("check", {}),
        ("forget", {"snapshots": ["0123456789abcdef"]}),
        ("prune", {}),
        ("chainReset", {"vm": "vm"}),
        ("restore", {"snapshot": "0123456789abcdef", "target": "restored.raw"}),
    ],
)
def test_the_worker_opens_each_repository_job_s_repository_ahead(
    repo_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opened_in: list[str],
    kind: str,
    fields: dict,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISKFERRY_PASSWORD", PASSWORD)
    job_kind = KINDS[kind]
    job = job_kind.model.model_validate({"kind": kind, "repo": repo_url, **fields})
    with contextlib.suppress(DiskferryError):  # no such snapshot, nothing tracked: opened first
        job_kind.run(job, JobContext(Progress(), QUIET, threading.Event()))
    assert opened_in == ["repository-open"]
