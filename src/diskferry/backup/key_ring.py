"""The repository's key files as restic keeps them: list, add, remove, and change a password.

Each key file wraps the same keys under its own password; any of them opens the
repository. A new key file is written before an old one is deleted, so the repository
can always be opened with one of the passwords.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from diskferry.backup.bounds import MAX_KEY_FILE, read_whole
from diskferry.backup.errors import PasswordError, RepositoryError
from diskferry.backup.keys import read_key_file, wrap_keys
from diskferry.backup.names import listing
from diskferry.backup.repository import Repository

_PREFIX = "keys/"


@dataclass
class KeyInfo:
    """One key file: its id, whether it opened the repository now, and where it came from."""

    id: str
    current: bool
    created: str
    host: str
    user: str

    def to_json(self) -> dict[str, object]:
        """The key as JSON-ready values, camelCase keys."""
        return {
            "id": self.id,
            "current": self.current,
            "created": self.created,
            "host": self.host,
            "user": self.user,
        }


def list_keys(repo: Repository) -> list[KeyInfo]:
    """The repository's key files, oldest first (those without a date first)."""
    found = []
    for info in listing(repo.store, "keys"):
        key = read_key_file(read_whole(repo.store, info.path, MAX_KEY_FILE), info.path, repo.url)
        found.append(
            KeyInfo(
                id=info.path.removeprefix(_PREFIX),
                current=info.path == repo.key_path,
                created=key.created,
                host=key.host,
                user=key.user,
            )
        )
    return sorted(found, key=lambda k: (k.created, k.id))


def add_key(repo: Repository, password: str) -> str:
    """Wrap the repository's keys under `password` in a new key file; its id."""
    if not repo.config.encrypted:
        raise RepositoryError(
            f"repository {repo.url} is not encrypted: it has no passwords", reason="NotEncrypted"
        )
    if not password:
        raise PasswordError("the new password is empty")
    key_id = os.urandom(16).hex()
    repo.store.put(_PREFIX + key_id, wrap_keys(repo.codec.keys, password, repo.config.kdf))
    return key_id


def find_key(repo: Repository, prefix: str) -> str:
    """The id of the one key file whose id starts with `prefix`."""
    matches = [k.id for k in list_keys(repo) if k.id.startswith(prefix)] if prefix else []
    if len(matches) != 1:
        what = "no key" if not matches else f"{len(matches)} keys"
        raise RepositoryError(f"{what} of {repo.url} match {prefix!r}", reason="UnknownKey")
    return matches[0]


def remove_key(repo: Repository, prefix: str) -> str:
    """Delete the key file `prefix` names (not the one in use); its id."""
    key_id = find_key(repo, prefix)
    if _PREFIX + key_id == repo.key_path:
        raise RepositoryError(
            f"key {key_id[:8]} is the one this password opens: remove it with another password",
            reason="KeyInUse",
        )
    repo.store.delete(_PREFIX + key_id)
    return key_id


def change_password(repo: Repository, password: str) -> str:
    """Replace the key file in use by one under `password`; the new key's id."""
    key_id = add_key(repo, password)
    if repo.key_path is not None:
        repo.store.delete(repo.key_path)
    repo.key_path = _PREFIX + key_id
    return key_id
