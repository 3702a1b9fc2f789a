"""What a reader takes of the repository's small objects at most, and the whole read of an object
that refuses, naming it, one longer than its bound before reading any of it.

A writer of the storage can put an object of any size under any name the repository reads
(a sparse file costs it nothing); no such object takes more of a reader's memory than its
bound. The sealed objects are bounded by what a seal can hold (codec.MAX_STORED).
"""

from __future__ import annotations

from diskferry.backup.errors import CorruptObjectError
from diskferry.objstore.errors import ObjectTooLargeError
from diskferry.objstore.store import ObjectStore

# the unsealed JSON objects, a few hundred bytes as diskferry writes them
MAX_CONFIG = 16 << 10
MAX_KEY_FILE = 16 << 10
MAX_LOCK = 16 << 10


def read_whole(store: ObjectStore, path: str, limit: int) -> bytes:
    """The object at `path`, read whole when it is at most `limit` bytes long; CorruptObjectError
    naming it, before any of it is read, when it is longer."""
    try:
        return store.get(path, limit=limit)
    except ObjectTooLargeError as e:
        raise CorruptObjectError(
            f"{store.url}: {path} is {e.size} bytes long, more than any such object of a "
            f"repository ({limit} bytes at most): it is damaged, or someone with write access "
            "to the storage put it there; it was not read",
            objects=(path,),
        ) from None
