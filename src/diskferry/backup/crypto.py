"""AES-256-GCM sealing with associated data, and scrypt key derivation from a password."""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

NONCE_SIZE = 12
TAG_SIZE = 16
KEY_SIZE = 32


class OpenError(Exception):
    """A sealed blob did not authenticate: wrong key, damaged bytes or wrong associated data."""


def seal(key: bytes, plaintext: bytes | memoryview, ad: bytes) -> bytes:
    """A random nonce followed by the AES-256-GCM ciphertext and tag of `plaintext`."""
    nonce = os.urandom(NONCE_SIZE)
    return nonce + AESGCM(key).encrypt(nonce, bytes(plaintext), ad)


def open_sealed(key: bytes, blob: bytes | memoryview, ad: bytes) -> bytes:
    """The plaintext of a blob made by `seal`; OpenError when it does not authenticate."""
    view = memoryview(blob)
    if len(view) < NONCE_SIZE + TAG_SIZE:
        raise OpenError("too short")
    try:
        return AESGCM(key).decrypt(bytes(view[:NONCE_SIZE]), bytes(view[NONCE_SIZE:]), ad)
    except InvalidTag:
        raise OpenError("authentication failed") from None


def derive_key(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    """A 32-byte key from the password with scrypt."""
    return Scrypt(salt=salt, length=KEY_SIZE, n=n, r=r, p=p).derive(password.encode())
