"""`keys/<id>`: the data key and the chunk-id key, wrapped under a key derived from the password."""

from __future__ import annotations

import base64
import getpass
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel, ValidationError

from diskferry.backup.config import KdfParams
from diskferry.backup.crypto import (
    KEY_SIZE,
    CostError,
    OpenError,
    check_cost,
    derive_key,
    open_sealed,
    seal,
)
from diskferry.backup.errors import CorruptObjectError, KdfBoundsError

_WRAP_AD = b"diskferry-keys-v1"


@dataclass(frozen=True)
class Keys:
    """A repository's secrets: `data` seals objects (None when unencrypted), `ids` names chunks."""

    data: bytes | None
    ids: bytes


class KeyFile(BaseModel):
    """The stored form of `Keys`: wrapped with AES-256-GCM, or the id key alone in the clear."""

    kdf: KdfParams | None = None
    salt: str = ""
    wrapped: str = ""
    id_key: str = ""
    created: str = ""  # when, on which host and by whom the key was made (empty in old keys)
    host: str = ""
    user: str = ""


def new_keys(encrypted: bool) -> Keys:
    """Fresh random keys."""
    return Keys(os.urandom(KEY_SIZE) if encrypted else None, os.urandom(KEY_SIZE))


def wrap_keys(keys: Keys, password: str | None, kdf: KdfParams) -> bytes:
    """The key file for `keys`: sealed under scrypt(password) when the repository is encrypted."""
    if keys.data is None:
        return KeyFile(id_key=_b64(keys.ids)).model_dump_json().encode()
    if not password:
        raise ValueError("an encrypted repository needs a password")
    salt = os.urandom(32)
    wrapping = derive_key(password, salt, kdf.n, kdf.r, kdf.p)
    wrapped = seal(wrapping, keys.data + keys.ids, _WRAP_AD)
    made = KeyFile(
        kdf=kdf,
        salt=_b64(salt),
        wrapped=_b64(wrapped),
        created=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        host=socket.gethostname(),
        user=getpass.getuser(),
    )
    return made.model_dump_json().encode()


def read_key_file(blob: bytes, path: str, url: str) -> KeyFile:
    """The key file stored at `path` in the repository at `url`: CorruptObjectError when it is
    malformed, KdfBoundsError when its scrypt parameters are past the bounds (crypto.check_cost)."""
    try:
        key_file = KeyFile.model_validate_json(blob)
    except ValidationError:
        raise CorruptObjectError(f"{url}: {path} is malformed", objects=(path,)) from None
    if key_file.kdf is not None:
        try:
            check_cost(key_file.kdf.n, key_file.kdf.r, key_file.kdf.p)
        except CostError as e:
            raise KdfBoundsError(
                f"{url}: {path} asks scrypt for {e}: no diskferry makes such a key file; someone "
                "with write access to the storage put it there to exhaust the memory or the time "
                "of whoever opens the repository; move it away",
                objects=(path,),
            ) from None
    return key_file


def unwrap_keys(key_file: KeyFile, password: str | None) -> Keys | None:
    """The keys in a key file, or None when the password does not open it."""
    if key_file.kdf is None:
        return Keys(None, base64.b64decode(key_file.id_key))
    if not password:
        return None
    kdf = key_file.kdf
    wrapping = derive_key(password, base64.b64decode(key_file.salt), kdf.n, kdf.r, kdf.p)
    try:
        both = open_sealed(wrapping, base64.b64decode(key_file.wrapped), _WRAP_AD)
    except OpenError:
        return None
    return Keys(both[:KEY_SIZE], both[KEY_SIZE:])


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
