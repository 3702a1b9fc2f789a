"""A key derivation begun ahead: the same key, taken once, and only for the same inputs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from diskferry.backup import crypto, key_ahead
from diskferry.backup.config import KdfParams
from diskferry.backup.errors import PasswordError
from diskferry.backup.repository import Repository

PASSWORD = "derived ahead"
_KDF = KdfParams(n=1 << 10, r=8, p=1)


@pytest.fixture
def derived_in(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that ran scrypt, in order."""
    threads: list[str] = []
    real = crypto._scrypt

    def recording(*args: object) -> bytes:
        threads.append(threading.current_thread().name)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(crypto, "_scrypt", recording)
    return threads


def test_a_key_begun_ahead_is_the_same_key_and_is_taken_once(derived_in: list[str]) -> None:
    salt = b"s" * 32
    direct = crypto._scrypt(PASSWORD, salt, 1 << 10, 8, 1)
    derived_in.clear()
    crypto.derive_ahead(PASSWORD, salt, 1 << 10, 8, 1)
    assert crypto.derive_key(PASSWORD, salt, 1 << 10, 8, 1) == direct
    assert crypto.derive_key(PASSWORD, salt, 1 << 10, 8, 1) == direct
    assert derived_in == ["key-derivation", threading.current_thread().name]


def test_other_inputs_do_not_take_a_key_begun_ahead(derived_in: list[str]) -> None:
    salt = b"t" * 32
    crypto.derive_ahead(PASSWORD, salt, 1 << 10, 8, 1)
    other = crypto.derive_key("another password", salt, 1 << 10, 8, 1)
    mine = crypto.derive_key(PASSWORD, salt, 1 << 10, 8, 1)
    assert other != mine
    assert mine == crypto._scrypt(PASSWORD, salt, 1 << 10, 8, 1)
    here = threading.current_thread().name
    # ahead for PASSWORD, here for the other password and for the check of `mine`
    assert sorted(derived_in) == sorted(["key-derivation", here, here])


def test_a_repository_opens_with_the_key_derived_ahead(
    tmp_path: Path, derived_in: list[str]
) -> None:
    url = str(tmp_path / "repo")
    Repository.init(url, PASSWORD, kdf=_KDF).close()
    derived_in.clear()
    key_ahead.begin(url, PASSWORD)
    with Repository.open(url, PASSWORD) as repo:
        assert repo.id
    assert derived_in == ["key-derivation"]


def test_a_wrong_password_derived_ahead_still_fails_to_open(tmp_path: Path) -> None:
    url = str(tmp_path / "repo")
    Repository.init(url, PASSWORD, kdf=_KDF).close()
    key_ahead.begin(url, "not it")
    with pytest.raises(PasswordError, match="wrong password"):
        Repository.open(url, "not it")


@pytest.mark.parametrize(
    "key_file",
    [b"not json", b'{"kdf": null}', b'{"kdf": {"name": "argon2"}, "salt": "AAAA"}', b"[]"],
)
def test_what_it_cannot_read_it_leaves_to_the_opening(
    tmp_path: Path, derived_in: list[str], key_file: bytes
) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "k1").write_bytes(key_file)
    waiting = dict(crypto._ahead)
    key_ahead.begin(str(tmp_path), PASSWORD)
    key_ahead.begin(str(tmp_path / "missing"), PASSWORD)
    assert derived_in == []
    assert crypto._ahead == waiting


def test_a_repository_of_several_keys_is_left_to_the_opening(
    tmp_path: Path, derived_in: list[str]
) -> None:
    url = str(tmp_path / "repo")
    Repository.init(url, PASSWORD, kdf=_KDF).close()
    keys = tmp_path / "repo" / "keys"
    (only,) = keys.iterdir()
    (keys / "second").write_bytes(only.read_bytes())
    derived_in.clear()
    key_ahead.begin(url, PASSWORD)
    assert derived_in == []
