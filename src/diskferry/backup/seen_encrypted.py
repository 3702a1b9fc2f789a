"""What this host remembers of the repositories it opened encrypted: a mark in each one's cache
folder, so that one whose storage later says it is plaintext is refused, not used.

A writer of the storage can turn a repository's config to `cipher: none` and its key files
to unsealed ones, MAC included; only a client that knew the repository before can tell.
Deleting the cache folder forgets it.
"""

from __future__ import annotations

from pathlib import Path

from diskferry.backup.errors import RepositoryError
from diskferry.backup.index_cache import cache_folder, cache_root, private_file

_MARK = "encrypted"


def remember_encrypted(repo_id: str, root: Path | None = None) -> None:
    """Note that the repository `repo_id` was opened encrypted (the cache under `root`)."""
    mark = cache_folder(repo_id, root) / _MARK
    try:
        private_file(mark)
    except OSError as e:
        raise RepositoryError(f"cannot write {mark}: {e.strerror}; set DISKFERRY_CACHE_DIR") from e


def was_encrypted(repo_id: str, root: Path | None = None) -> bool:
    """Whether this host opened the repository `repo_id` encrypted before."""
    return ((root or cache_root()) / repo_id / _MARK).exists()
