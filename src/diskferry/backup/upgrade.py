"""Upgrading a format-2 repository to format 3: its config, which format 2 left without a MAC,
written again with the MAC its keys make (config_seal.py). Nothing else differs between them.

Anyone with write access to the storage could have changed a format-2 config, and the MAC
vouches for what the upgrade writes: so it takes only what it can check. The password must
open a key file, and the scrypt parameters that the config gives new key files must be those
of that key file; a plaintext config is taken only when asked for, with no password, on a
host that never opened the repository encrypted. The chunk size and the incrementals' limit
are taken as the config says them. The new config replaces the old one under the exclusive
lock, once it is known that the old one is still the one checked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from diskferry.backup.bounds import MAX_CONFIG, read_whole
from diskferry.backup.codec import Codec
from diskferry.backup.config import FORMAT_VERSION, UPGRADABLE_VERSION, RepoConfig
from diskferry.backup.config_seal import config_fields, encode_config, upgraded_config
from diskferry.backup.errors import RepositoryError, TamperingError
from diskferry.backup.job import UpgradeResult
from diskferry.backup.opening import read_config, refuse_plaintext, unlock
from diskferry.backup.repository import Repository
from diskferry.backup.seen_encrypted import remember_encrypted
from diskferry.objstore.store import S3Options


def upgrade(
    url: str,
    password: str | None,
    *,
    plaintext_ok: bool = False,
    s3: S3Options | None = None,
    cache_root: Path | None = None,
    wait: float = 0.0,
    notify: Callable[[str], None] = lambda message: None,
    cancel: threading.Event | None = None,
) -> UpgradeResult:
    """Bring the format-2 repository at `url` to format 3 with `password` (a plaintext one
    with none, and only when `plaintext_ok`); a format-3 repository is opened and left as it
    is. The exclusive lock is waited for up to `wait` seconds."""
    store, raw = read_config(url, s3)
    fields = config_fields(raw, url)
    if fields.get("version") == FORMAT_VERSION:
        with Repository.open(url, password, s3=s3, cache_root=cache_root) as opened:
            return _result(opened.config, url, FORMAT_VERSION, opened.key_path)
    config = upgraded_config(fields, url)
    if not config.encrypted and not plaintext_ok:
        refuse_plaintext(config, url, password, cache_root)
        raise RepositoryError(
            f"repository {url} says it is not encrypted, which its format-2 config cannot prove: "
            "if it was made with --no-encryption, upgrade it with --insecure-no-encryption; "
            "otherwise give its password",
            reason="NotEncrypted",
        )
    unlocked = unlock(store, config, password, cache_root)
    if config.encrypted and unlocked.kdf != config.kdf:
        raise TamperingError(
            f"the config of {url} gives new key files other scrypt parameters than "
            f"{unlocked.path} was made with: someone with write access to its storage changed "
            "it; do not upgrade the repository until you know who"
        )
    repo = Repository(store, config, Codec(unlocked.keys), cache_root, key_path=unlocked.path)
    with repo, repo.lock("exclusive", "upgrade", wait=wait, notify=notify, cancel=cancel):
        if read_whole(repo.store, "config", MAX_CONFIG) != raw:
            raise RepositoryError(
                f"the config of {url} changed while it was being upgraded: run the upgrade again",
                reason="ConfigChanged",
            )
        repo.store.put("config", encode_config(config, unlocked.keys))
    if config.encrypted:
        remember_encrypted(config.id, cache_root)
    return _result(config, url, UPGRADABLE_VERSION, unlocked.path)


def _result(config: RepoConfig, url: str, found: int, key_file: str | None) -> UpgradeResult:
    return UpgradeResult(
        repository=config.id,
        url=url,
        found_format=found,
        format=config.version,
        encrypted=config.encrypted,
        key_file=key_file,
    )
