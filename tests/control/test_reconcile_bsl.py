"""BackupStorageLocation: Available with its repository made at first use, on a directory and
on S3; Unavailable saying why when a Secret, the password or the bucket is wrong."""

from __future__ import annotations

import base64
import uuid

import pytest
from control_support import stop_workers_under, wait_until
from datamover_support import (
    CREDENTIALS,
    PASSWORD,
    filesystem_bsl,
    make_bucket,
    running_moto,
    s3_bsl,
    secret,
)
from reconcile_support import Daemon

from diskferry.backup.config import KdfParams
from diskferry.backup.repository import Repository

BUCKET = "diskferry-bsl"


@pytest.fixture(scope="module")
def s3_endpoint():
    with running_moto() as endpoint:
        make_bucket(endpoint, BUCKET)
        yield endpoint


@pytest.fixture
def daemon(tmp_path, monkeypatch):
    monkeypatch.setenv("DISKFERRY_CACHE_DIR", str(tmp_path / "cache"))
    d = Daemon(tmp_path / "data")
    yield d
    d.stop()
    stop_workers_under(tmp_path)


def test_filesystem_location_is_made_at_first_use_and_opens_after(
    daemon, tmp_path, repositories_opened_by_reconcilers
):
    secret(daemon, "repo-pass", password=PASSWORD)
    daemon.apply("BackupStorageLocation", "repo", filesystem_bsl(tmp_path / "backups"))
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    status = bsl["status"]
    assert status["phase"] == "Available", status
    assert status["message"].startswith("created the repository")
    assert status["lastValidationTime"]
    with Repository.open(str(tmp_path / "backups"), PASSWORD) as repo:
        assert repo.id == status["repositoryID"]
    wait_until(lambda: "RepositoryCreated" in [e["reason"] for e in daemon.events("repo")])
    assert repositories_opened_by_reconcilers == []


def test_missing_secret_is_unavailable_and_then_available_once_it_exists(daemon, tmp_path):
    spec = filesystem_bsl(tmp_path / "backups", validationFrequency="1s")
    daemon.apply("BackupStorageLocation", "repo", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Unavailable"
    assert (
        "the Secret repo-pass with the repository password does not exist"
        in (bsl["status"]["message"])
    )
    assert not (tmp_path / "backups").exists()
    secret(daemon, "repo-pass", password=PASSWORD)
    daemon.wait_phase("BackupStorageLocation", "repo", "Available", timeout=30)


def test_wrong_password_is_unavailable(daemon, tmp_path):
    Repository.init(str(tmp_path / "backups"), "another", kdf=KdfParams(n=1 << 10)).close()
    secret(daemon, "repo-pass", password=PASSWORD)
    daemon.apply("BackupStorageLocation", "repo", filesystem_bsl(tmp_path / "backups"))
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Unavailable"
    assert "wrong password" in bsl["status"]["message"]
    warnings = [e for e in daemon.events("repo") if e["type"] == "Warning"]
    assert warnings and warnings[0]["reason"] == "WrongPassword"


def test_an_encrypted_repository_without_a_password_names_the_field_to_set(daemon, tmp_path):
    Repository.init(str(tmp_path / "backups"), PASSWORD, kdf=KdfParams(n=1 << 10)).close()
    spec = filesystem_bsl(tmp_path / "backups", config={"encryption": "none"})
    del spec["encryptionSecretRef"]
    daemon.apply("BackupStorageLocation", "repo", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    message = bsl["status"]["message"]
    assert bsl["status"]["phase"] == "Unavailable"
    assert "is encrypted" in message and "spec.encryptionSecretRef" in message
    assert "DISKFERRY_PASSWORD" not in message and "--password-file" not in message


def test_a_read_only_location_without_a_repository_names_the_access_mode(daemon, tmp_path):
    secret(daemon, "repo-pass", password=PASSWORD)
    spec = filesystem_bsl(tmp_path / "backups", accessMode="ReadOnly")
    daemon.apply("BackupStorageLocation", "repo", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    message = bsl["status"]["message"]
    assert bsl["status"]["phase"] == "Unavailable"
    assert "no repository" in message and "spec.accessMode: ReadWrite" in message
    assert "diskferry repo" not in message and not (tmp_path / "backups").exists()


def test_relative_bucket_of_a_filesystem_location_is_refused(daemon):
    with pytest.raises(Exception, match="not an absolute directory"):
        daemon.apply(
            "BackupStorageLocation",
            "repo",
            {"provider": "filesystem", "objectStorage": {"bucket": "relative/dir"}},
        )


def test_s3_location_with_credentials_file(daemon, s3_endpoint):
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud=CREDENTIALS)
    prefix = uuid.uuid4().hex
    daemon.apply("BackupStorageLocation", "repo", s3_bsl(s3_endpoint, BUCKET, prefix))
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Available", bsl["status"]
    assert f"s3://{BUCKET}/{prefix}" in bsl["status"]["message"]


def test_s3_location_without_its_bucket_is_unavailable(daemon, s3_endpoint):
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud=CREDENTIALS)
    daemon.apply("BackupStorageLocation", "repo", s3_bsl(s3_endpoint, "no-such-bucket", "p"))
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Unavailable"
    assert "no-such-bucket" in bsl["status"]["message"]


def test_bad_credentials_file_is_unavailable(daemon, s3_endpoint):
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud="not a credentials file")
    daemon.apply("BackupStorageLocation", "repo", s3_bsl(s3_endpoint, BUCKET, "p"))
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Unavailable"
    assert "not an AWS credentials file" in bsl["status"]["message"]


def test_a_location_without_a_password_is_unavailable_and_makes_no_repository(daemon, tmp_path):
    spec = filesystem_bsl(tmp_path / "backups")
    del spec["encryptionSecretRef"]
    daemon.apply("BackupStorageLocation", "repo", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Unavailable"
    message = bsl["status"]["message"]
    assert "spec.encryptionSecretRef" in message and "spec.config.encryption: none" in message
    assert not (tmp_path / "backups").exists()
    [warning] = [e for e in daemon.events("repo") if e["type"] == "Warning"]
    assert warning["reason"] == "EncryptionNotConfigured"


def test_encryption_none_makes_an_unencrypted_repository_and_says_so(daemon, tmp_path):
    spec = filesystem_bsl(tmp_path / "backups", config={"encryption": "none"})
    del spec["encryptionSecretRef"]
    daemon.apply("BackupStorageLocation", "repo", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Available", bsl["status"]
    [encrypted] = [c for c in bsl["status"]["conditions"] if c["type"] == "Encrypted"]
    assert (encrypted["status"], encrypted["reason"]) == ("False", "EncryptionDisabled")
    assert "unencrypted" in encrypted["message"]
    with Repository.open(str(tmp_path / "backups"), None) as repo:
        assert repo.id == bsl["status"]["repositoryID"]
    warnings = wait_until(
        lambda: [e for e in daemon.events("repo") if e["reason"] == "Unencrypted"]
    )
    assert warnings[0]["type"] == "Warning"


def test_an_encrypted_location_says_so_in_its_condition(daemon, tmp_path):
    secret(daemon, "repo-pass", password=PASSWORD)
    daemon.apply("BackupStorageLocation", "repo", filesystem_bsl(tmp_path / "backups"))
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    [encrypted] = [c for c in bsl["status"]["conditions"] if c["type"] == "Encrypted"]
    assert (encrypted["status"], encrypted["reason"]) == ("True", "PasswordSet")


def test_a_password_and_encryption_none_together_are_refused(daemon, tmp_path):
    spec = filesystem_bsl(tmp_path / "backups", config={"encryption": "none"})
    with pytest.raises(Exception, match="encryptionSecretRef"):
        daemon.apply("BackupStorageLocation", "repo", spec)


@pytest.fixture(scope="module")
def tls_endpoint(tls):
    with running_moto(tls=tls) as endpoint:
        make_bucket(endpoint, BUCKET, tls.ca)
        yield endpoint


def test_an_s3_endpoint_behind_a_private_ca_needs_that_ca(daemon, tls_endpoint):
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud=CREDENTIALS)
    daemon.apply("BackupStorageLocation", "repo", s3_bsl(tls_endpoint, BUCKET, "untrusted"))
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Unavailable"
    assert "TLS certificate is not trusted" in bsl["status"]["message"]


def test_an_inline_ca_cert_is_trusted(daemon, tls, tls_endpoint):
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud=CREDENTIALS)
    spec = s3_bsl(tls_endpoint, BUCKET, uuid.uuid4().hex)
    spec["objectStorage"]["caCert"] = base64.b64encode(tls.ca.read_bytes()).decode()
    daemon.apply("BackupStorageLocation", "repo", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Available", bsl["status"]


def test_a_ca_cert_ref_to_a_missing_secret_is_unavailable_unless_optional(daemon, tls_endpoint):
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud=CREDENTIALS)
    spec = s3_bsl(tls_endpoint, BUCKET, uuid.uuid4().hex)
    spec["objectStorage"]["caCertRef"] = {"name": "s3-ca", "key": "ca-bundle.crt"}
    daemon.apply("BackupStorageLocation", "repo", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "repo", "Available", "Unavailable")
    assert (
        "the Secret s3-ca with the S3 endpoint's CA certificate does not exist"
        in (bsl["status"]["message"])
    )
    spec["objectStorage"]["caCertRef"]["optional"] = True
    daemon.apply("BackupStorageLocation", "optional", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "optional", "Available", "Unavailable")
    assert "TLS certificate is not trusted" in bsl["status"]["message"]


def test_ca_cert_and_ca_cert_ref_together_are_refused(daemon):
    spec = s3_bsl("https://127.0.0.1:9", BUCKET, "p")
    spec["objectStorage"]["caCert"] = base64.b64encode(b"pem").decode()
    spec["objectStorage"]["caCertRef"] = {"name": "s3-ca", "key": "ca-bundle.crt"}
    with pytest.raises(Exception, match="caCert and caCertRef"):
        daemon.apply("BackupStorageLocation", "repo", spec)


def test_the_profile_of_the_credentials_file_is_the_one_config_names(daemon, s3_endpoint):
    secret(daemon, "repo-pass", password=PASSWORD)
    secret(daemon, "s3-keys", cloud=CREDENTIALS.replace("[default]", "[backups]"))
    spec = s3_bsl(s3_endpoint, BUCKET, uuid.uuid4().hex)
    daemon.apply("BackupStorageLocation", "plain", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "plain", "Available", "Unavailable")
    assert "no [default] profile" in bsl["status"]["message"]
    spec["config"]["profile"] = "backups"
    daemon.apply("BackupStorageLocation", "named", spec)
    bsl = daemon.wait_phase("BackupStorageLocation", "named", "Available", "Unavailable")
    assert bsl["status"]["phase"] == "Available", bsl["status"]
