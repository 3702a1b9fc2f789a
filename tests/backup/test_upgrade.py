"""A format-2 repository, whose config carries no MAC, is upgraded to format 3 with its password
under the exclusive lock, after which backups and restores go on through it; an upgrade takes
nothing it cannot check, and changes nothing when it refuses."""

import json
import os

import pytest
from backup_support import (  # noqa: F401
    PASSWORD,
    MiB,
    as_format_2,
    engine_fixture,
    files_under,
    make_disk,
    write_random,
)

from diskferry.backup.bounds import MAX_CONFIG
from diskferry.backup.config_seal import decode_config, verify_config
from diskferry.backup.errors import (
    LockedError,
    PasswordError,
    RepositoryError,
    RepositoryNotFoundError,
    TamperingError,
)
from diskferry.backup.locks import acquire
from diskferry.backup.repository import Repository
from diskferry.backup.seen_encrypted import remember_encrypted
from diskferry.backup.upgrade import upgrade
from diskferry.objstore.store import ObjectStore


def _config(url):
    return ObjectStore(url).get("config", limit=MAX_CONFIG)


def test_a_format_2_repository_is_upgraded_then_backed_up_and_restored_through(engine, tmp_path):
    volume = make_disk(tmp_path / "disk.raw")
    first = engine.backup(disks={"root": volume}).disks[0].snapshot
    engine.keep(first, volume)
    as_format_2(engine.url)
    with pytest.raises(RepositoryError, match="format 2, whose config is not authenticated") as old:
        engine.restore(first, tmp_path / "refused.raw")
    assert f"run 'diskferry repo upgrade --repo {engine.url}'" in old.value.message
    others = {k: v for k, v in files_under(engine.url).items() if k != "config"}

    done = upgrade(engine.url, PASSWORD)
    assert (done.found_format, done.format, done.encrypted) == (2, 3, True)
    assert {k: v for k, v in files_under(engine.url).items() if k != "config"} == others
    with Repository.open(engine.url, PASSWORD) as opened:
        assert opened.config.version == 3 and opened.id == done.repository
        assert done.key_file == opened.key_path
    assert engine.restores_exactly(first)

    write_random(volume + ".cbt.qcow2", 5 * MiB, 128 * 1024)
    second = engine.backup(disks={"root": volume}).disks[0]
    assert second.type == "incremental"  # the chain of format 2 goes on
    engine.keep(second.snapshot, volume)
    assert engine.restores_exactly(second.snapshot) and engine.restores_exactly(first)


def test_the_upgraded_config_is_the_old_one_with_its_mac(repo_url, new_repo):
    made = new_repo(repo_url, chunk_size=64 * 1024, max_incrementals=7)
    old = json.loads(as_format_2(repo_url))
    upgrade(repo_url, PASSWORD)
    stored = decode_config(_config(repo_url), repo_url)
    verify_config(stored, made.codec.keys, repo_url)
    assert stored.config.model_dump(mode="json") == {**old, "version": 3}


def test_an_upgrade_changes_nothing_when_the_password_is_wrong_or_missing(repo_url, new_repo):
    new_repo(repo_url)
    old = as_format_2(repo_url)
    with pytest.raises(PasswordError, match="wrong password"):
        upgrade(repo_url, "not the password")
    with pytest.raises(PasswordError, match="is encrypted"):
        upgrade(repo_url, None)
    with pytest.raises(PasswordError, match="is encrypted"):
        upgrade(repo_url, None, plaintext_ok=True)
    assert _config(repo_url) == old


def test_a_plaintext_repository_is_upgraded_only_when_asked_and_without_a_password(
    repo_url, new_repo
):
    new_repo(repo_url, password=None, encrypted=False)
    old = as_format_2(repo_url)
    with pytest.raises(RepositoryError, match="--insecure-no-encryption") as unasked:
        upgrade(repo_url, None)
    assert unasked.value.reason == "NotEncrypted"
    with pytest.raises(TamperingError, match="not encrypted, but a password was given"):
        upgrade(repo_url, PASSWORD, plaintext_ok=True)
    assert _config(repo_url) == old
    done = upgrade(repo_url, None, plaintext_ok=True)
    assert (done.found_format, done.format, done.encrypted) == (2, 3, False)
    with Repository.open(repo_url, None) as opened:
        assert not opened.config.encrypted


def test_a_plaintext_config_is_refused_on_a_host_that_saw_the_repository_encrypted(
    dir_url, new_repo
):
    made = new_repo(dir_url, password=None, encrypted=False)
    remember_encrypted(made.id)  # as if this host had opened it before its storage was changed
    old = as_format_2(dir_url)
    with pytest.raises(TamperingError, match="was encrypted when this host last opened it"):
        upgrade(dir_url, None, plaintext_ok=True)
    assert _config(dir_url) == old


@pytest.mark.parametrize(
    "change",
    [{"kdf": {"name": "scrypt", "n": 2, "r": 1, "p": 1}}, {"cipher": "none"}],
    ids=["weaker-kdf", "cipher-none"],
)
def test_a_config_changed_before_the_upgrade_is_not_vouched_for(dir_url, new_repo, change):
    new_repo(dir_url)
    fields = json.loads(as_format_2(dir_url))
    changed = json.dumps({**fields, **change}).encode()
    ObjectStore(dir_url).put("config", changed)
    with pytest.raises(TamperingError):
        upgrade(dir_url, PASSWORD, plaintext_ok=True)
    assert _config(dir_url) == changed


def test_an_upgrade_takes_the_exclusive_lock(repo_url, new_repo):
    new_repo(repo_url)
    old = as_format_2(repo_url)
    with acquire(ObjectStore(repo_url), "shared", "backup"):
        with pytest.raises(LockedError, match="backup"):
            upgrade(repo_url, PASSWORD)
        assert _config(repo_url) == old
    upgrade(repo_url, PASSWORD)
    assert list(ObjectStore(repo_url).list("locks/")) == []


def test_a_format_3_repository_is_left_as_it_is(repo_url, new_repo):
    made = new_repo(repo_url)
    current = _config(repo_url)
    with pytest.raises(PasswordError, match="wrong password"):
        upgrade(repo_url, "not the password")
    done = upgrade(repo_url, PASSWORD)
    assert (done.found_format, done.format, done.repository) == (3, 3, made.id)
    assert _config(repo_url) == current


def test_only_format_2_is_upgraded(repo_url, new_repo, tmp_path):
    new_repo(repo_url)
    fields = json.loads(as_format_2(repo_url))
    for version in (1, 4):
        ObjectStore(repo_url).put("config", json.dumps({**fields, "version": version}).encode())
        with pytest.raises(RepositoryError, match=f"format {version}") as refused:
            upgrade(repo_url, PASSWORD)
        assert refused.value.reason == "UnsupportedFormat"
    with pytest.raises(RepositoryNotFoundError):
        upgrade(str(tmp_path / "nothing"), PASSWORD)
    assert not os.path.exists(tmp_path / "nothing")
