"""Fixtures: a moto S3 server for the session, and a fresh store URL on a directory or S3."""

import uuid

import pytest
from s3server import make_bucket, running_moto, use_endpoint

BUCKET = "diskferry-test"


@pytest.fixture(scope="session")
def s3_endpoint():
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture(params=["dir", "s3"])
def store_url(request, tmp_path, monkeypatch):
    if request.param == "dir":
        return str(tmp_path / "store")
    endpoint = request.getfixturevalue("s3_endpoint")
    use_endpoint(monkeypatch, endpoint)
    return f"s3://{BUCKET}/{uuid.uuid4().hex}"
