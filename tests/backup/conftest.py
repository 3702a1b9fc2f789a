"""Fixtures: repositories on a directory and on a moto S3 server, with a fast KDF."""

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "objstore"))

from s3server import make_bucket, running_moto, use_endpoint

from diskferry.backup.config import KdfParams
from diskferry.backup.repository import Repository

BUCKET = "diskferry-backup-test"
FAST_KDF = KdfParams(n=1 << 10, r=8, p=1)
PASSWORD = "correct horse"


@pytest.fixture(scope="session")
def s3_endpoint():
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    path = tmp_path / "cache"
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(path))
    return path


@pytest.fixture(params=["dir", "s3"])
def repo_url(request, tmp_path, monkeypatch):
    if request.param == "dir":
        return str(tmp_path / "repo")
    use_endpoint(monkeypatch, request.getfixturevalue("s3_endpoint"))
    return f"s3://{BUCKET}/{uuid.uuid4().hex}"


@pytest.fixture
def dir_url(tmp_path):
    return str(tmp_path / "repo")


@pytest.fixture
def new_repo():
    """A factory of new repositories with a fast KDF, closed after the test."""
    made = []

    def make(url, password=PASSWORD, **options):
        options.setdefault("kdf", FAST_KDF)
        made.append(Repository.init(url, password, **options))
        return made[-1]

    yield make
    for r in made:
        r.close()


@pytest.fixture
def repo(repo_url, new_repo):
    return new_repo(repo_url, chunk_size=64 * 1024)
