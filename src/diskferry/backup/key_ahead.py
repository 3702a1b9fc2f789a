"""A directory repository's key derivation begun ahead, from its key file alone.

scrypt takes a fifth of a second; a command that is about to open a repository can begin
it before it has loaded what parses its command line and runs the job. This reads only
what the derivation needs (the key file's salt and scrypt parameters) and checks nothing:
the opening reads and checks the key file itself, and takes the derived key only where
its inputs are the same. A repository with several key files is left to the opening,
which tries them in turn.
"""

from __future__ import annotations

import base64
import json

from diskferry.backup.bounds import MAX_KEY_FILE
from diskferry.backup.crypto import derive_ahead
from diskferry.objstore.errors import ObjectStoreError
from diskferry.objstore.store import ObjectStore


def begin(repo: str, password: str) -> None:
    """Begin deriving the wrapping key of the directory repository `repo`'s one key file."""
    try:
        store = ObjectStore(repo, create=False)
        keys = list(store.list("keys/"))
        if len(keys) != 1:
            return
        key_file = json.loads(store.get(keys[0].path, limit=MAX_KEY_FILE))
        kdf = key_file["kdf"]
        if not isinstance(kdf, dict) or kdf.get("name", "scrypt") != "scrypt":
            return
        salt = base64.b64decode(key_file["salt"], validate=True)
        n, r, p = (int(kdf[name]) for name in "nrp")
    except (ObjectStoreError, ValueError, KeyError, TypeError):
        return
    derive_ahead(password, salt, n, r, p)
