"""A writer of the repository's storage cannot turn its encryption off, nor change its config,
unnoticed: the config carries a MAC under the repository keys, a password never opens a plaintext
repository, and a client remembers the repositories it saw encrypted."""

import base64
import json
import os

import pytest
from backup_support import PASSWORD, MiB, engine_fixture, files_under  # noqa: F401

from diskferry.backup.bounds import MAX_CONFIG
from diskferry.backup.config import RepoConfig
from diskferry.backup.config_seal import encode_config
from diskferry.backup.errors import TamperingError
from diskferry.backup.keys import KeyFile, Keys
from diskferry.backup.repository import Repository


def _small_disk(path):
    with open(path, "wb") as f:
        f.truncate(4 * MiB)
        f.write(os.urandom(MiB + 99))
    return str(path)


def _read_config(url):
    with open(os.path.join(url, "config"), "rb") as f:
        return json.loads(f.read())


def _write(url, name, data):
    with open(os.path.join(url, name), "wb") as f:
        f.write(data)


def _unsealed_keys(url, ids):
    """Every key file replaced by one holding only a chunk-id key, in the clear."""
    for name in os.listdir(os.path.join(url, "keys")):
        key = KeyFile(id_key=base64.b64encode(ids).decode())
        _write(url, f"keys/{name}", key.model_dump_json().encode())


def turn_encryption_off(url, *, with_mac):
    """Do what a writer of the storage can: say `cipher: none`, and unseal the keys. With
    `with_mac`, the config's MAC is made again with the key it now holds in the clear."""
    ids = os.urandom(32)
    fields = _read_config(url)
    fields["cipher"] = "none"
    if with_mac:
        fields.pop("mac", None)
        _write(url, "config", encode_config(RepoConfig(**fields), Keys(None, ids)))
    else:
        _write(url, "config", json.dumps(fields).encode())
    _unsealed_keys(url, ids)


@pytest.mark.parametrize("with_mac", [False, True], ids=["config-edited", "mac-made-again"])
def test_encryption_turned_off_is_refused_by_backup_and_restore(
    engine, tmp_path, monkeypatch, with_mac
):
    disk = _small_disk(tmp_path / "disk.raw")
    first = engine.backup(disks={"d": disk}).disks[0].snapshot
    turn_encryption_off(engine.url, with_mac=with_mac)
    tampered = files_under(engine.url)
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    with pytest.raises(TamperingError, match="not encrypted") as refused:  # a VM new to it
        engine.backup("other", disks={"d": disk}, password_file=str(secret))
    assert engine.url in refused.value.message
    assert files_under(engine.url) == tampered  # nothing written, plaintext or other
    monkeypatch.delenv("DISKFERRY_PASSWORD")
    with pytest.raises(TamperingError, match="was encrypted when this host last opened it"):
        engine.restore(first, tmp_path / "out.raw")
    assert not (tmp_path / "out.raw").exists()


@pytest.mark.parametrize(
    "change",
    [{"kdf": {"name": "scrypt", "n": 2, "r": 1, "p": 1}}, {"chunk_size": 4096}, {"mac": "AAAA"}],
    ids=["weaker-kdf", "chunk-size", "mac"],
)
def test_a_config_changed_without_the_keys_fails_its_mac(repo_url, new_repo, change):
    repo = new_repo(repo_url)
    fields = json.loads(repo.store.get("config", limit=MAX_CONFIG))
    repo.store.put("config", json.dumps({**fields, **change}).encode())
    with pytest.raises(TamperingError, match=r"config of .* does not match its MAC"):
        Repository.open(repo_url, PASSWORD)


def test_an_unsealed_key_in_an_encrypted_repository_is_refused(dir_url, new_repo):
    repo = new_repo(dir_url)
    key = next(iter(repo.store.list("keys/"))).path
    _unsealed_keys(dir_url, os.urandom(32))
    with pytest.raises(TamperingError, match=f"{key} holds an unsealed key"):
        Repository.open(dir_url, PASSWORD)


def test_a_password_never_opens_a_plaintext_repository(repo_url, new_repo):
    new_repo(repo_url, password=None, encrypted=False)
    with pytest.raises(TamperingError, match="not encrypted, but a password was given"):
        Repository.open(repo_url, PASSWORD)
    with Repository.open(repo_url, None) as opened:
        assert not opened.config.encrypted
