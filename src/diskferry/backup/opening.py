"""What opening a repository takes from its storage: the config as stored, and the keys that
its password opens, or that it holds in the clear where a plaintext config can be believed."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from diskferry.backup.bounds import MAX_CONFIG, MAX_KEY_FILE, read_whole
from diskferry.backup.config import KdfParams, RepoConfig
from diskferry.backup.errors import PasswordError, RepositoryNotFoundError, TamperingError
from diskferry.backup.keys import Keys, read_key_file, unwrap_keys
from diskferry.backup.names import listing
from diskferry.backup.seen_encrypted import was_encrypted
from diskferry.objstore.errors import ObjectNotFoundError
from diskferry.objstore.store import ObjectStore, S3Options


class Unlocked(NamedTuple):
    """The repository keys, the key file that held them, and its scrypt parameters (None for
    the key file of a plaintext repository)."""

    keys: Keys
    path: str
    kdf: KdfParams | None


def read_config(url: str, s3: S3Options | None) -> tuple[ObjectStore, bytes]:
    """The store of the repository at `url` and its config's bytes; RepositoryNotFoundError
    where there is none (a missing folder is not made)."""
    try:
        store = ObjectStore(url, s3, create=False)
        return store, read_whole(store, "config", MAX_CONFIG)
    except ObjectNotFoundError:
        raise RepositoryNotFoundError(
            f"no repository at {url}: make one with 'diskferry repo init --repo {url}'"
        ) from None


def unlock(
    store: ObjectStore, config: RepoConfig, password: str | None, cache_root: Path | None
) -> Unlocked:
    """The keys of the repository `config` describes, from the first key file the password
    opens. A plaintext config is refused where it cannot be believed (refuse_plaintext), and an
    unsealed key file in an encrypted repository."""
    if config.encrypted and not password:
        raise PasswordError(
            f"repository {store.url} is encrypted: set DISKFERRY_PASSWORD or give --password-file"
        )
    if not config.encrypted:
        refuse_plaintext(config, store.url, password, cache_root)
    for info in listing(store, "keys"):
        key_file = read_key_file(read_whole(store, info.path, MAX_KEY_FILE), info.path, store.url)
        keys = unwrap_keys(key_file, password)
        if keys is None:
            continue
        if config.encrypted and keys.data is None:
            raise TamperingError(
                f"{info.path} holds an unsealed key, but repository {store.url} is encrypted: "
                "someone with write access to its storage put it there to turn encryption "
                "off; do not use the repository until you know who"
            )
        return Unlocked(keys, info.path, key_file.kdf)
    raise PasswordError(f"wrong password for repository {store.url}")


def refuse_plaintext(
    config: RepoConfig, url: str, password: str | None, cache_root: Path | None
) -> None:
    """TamperingError where a plaintext config cannot be believed: a password was given, or
    this host opened the repository encrypted before."""
    if password:
        raise TamperingError(
            f"repository {url} says it is not encrypted, but a password was given: open it "
            "without one if it was made with --no-encryption; otherwise someone with write "
            "access to its storage turned its encryption off, and it must not be used"
        )
    if was_encrypted(config.id, cache_root):
        raise TamperingError(
            f"repository {config.id} at {url} was encrypted when this host last opened it, and "
            "now says it is not: someone with write access to its storage turned its "
            "encryption off; do not use it"
        )
