"""DataUpload and DataDownload against a BackupStorageLocation on moto's S3 server, its keys
in an AWS credentials file in a Secret: the workers get them as files, never the environment;
behind a private CA, the location's caCertRef is what the daemon and the workers trust, and
the credentials file's profile the one its config names."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from control_support import stop_workers_under
from datamover_support import (
    CREDENTIALS,
    PASSWORD,
    MoverDaemon,
    download,
    make_bucket,
    running_moto,
    s3_bsl,
    secret,
)

BUCKET = "diskferry-movers"
ENDED = ("Completed", "Failed", "Canceled")


@pytest.fixture(scope="module")
def s3_endpoint():
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def tls_endpoint(tls):
    with running_moto(tls=tls) as endpoint:
        make_bucket(endpoint, BUCKET, tls.ca)
        yield endpoint


def test_upload_and_download_on_s3(tmp_path, monkeypatch, s3_endpoint):
    round_trip(tmp_path, monkeypatch, s3_bsl(s3_endpoint, BUCKET, uuid.uuid4().hex))


def test_upload_and_download_on_s3_behind_a_private_ca(tmp_path, monkeypatch, tls, tls_endpoint):
    spec = s3_bsl(tls_endpoint, BUCKET, uuid.uuid4().hex)
    spec["objectStorage"]["caCertRef"] = {"name": "s3-ca", "key": "ca-bundle.crt"}
    spec["config"]["profile"] = "backups"
    keys = CREDENTIALS.replace("[default]", "[backups]")
    round_trip(tmp_path, monkeypatch, spec, {"ca-bundle.crt": tls.ca.read_text()}, keys)


def round_trip(
    tmp_path: Path,
    monkeypatch,
    spec: dict[str, Any],
    ca: dict[str, str] | None = None,
    keys: str = CREDENTIALS,
) -> None:
    """A VM's disk uploaded to the location `spec` (its keys in the Secret s3-keys) and
    downloaded back, byte for byte."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    daemon = MoverDaemon(tmp_path / "data")
    try:
        secret(daemon, "repo-pass", password=PASSWORD)
        secret(daemon, "s3-keys", cloud=keys)
        if ca is not None:
            secret(daemon, "s3-ca", **ca)
        daemon.apply("BackupStorageLocation", "repo", spec)
        daemon.wait_phase("BackupStorageLocation", "repo", "Available")
        claim = daemon.disk("vd-a", data=os.urandom(150_000), offset=4096)
        daemon.vm("vm-a", ["vd-a"])
        daemon.upload("up", "vm-a")
        uploaded = daemon.wait_phase("DataUpload", "up", *ENDED)["status"]
        assert uploaded["phase"] == "Completed", uploaded
        assert uploaded["nodeOS"] == "linux"
        download(daemon, "dd", uploaded["disks"][0]["snapshotID"], "vd-back")
        downloaded = daemon.wait_phase("DataDownload", "dd", *ENDED)["status"]
        assert downloaded["phase"] == "Completed", downloaded
        back = daemon.claim(daemon.wait_phase("VirtualDisk", "vd-back", "Ready"))
        assert back.read_bytes() == claim.read_bytes()
    finally:
        daemon.stop()
        stop_workers_under(tmp_path)
