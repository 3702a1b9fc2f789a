"""AES-256-GCM sealing with associated data, scrypt key derivation from a password, and MACs
under keys derived (HKDF) from the repository keys.

scrypt is run only within bounds (check_cost): its parameters come from key files, which a
writer of the storage can forge to make the derivation take all memory or all time.

A derivation can be begun ahead, in a thread (scrypt runs outside the GIL), by a caller
that knows the inputs before the code that needs the key has loaded: the first
`derive_key` with the same inputs takes its result.
"""

from __future__ import annotations

import hmac
import os
import threading
from concurrent.futures import Future

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

NONCE_SIZE = 12
TAG_SIZE = 16
KEY_SIZE = 32
# scrypt's bounds: 16 times the memory of what diskferry makes (n=2^16, r=8, p=1: 64 MiB), and
# 16 passes over it at most
MAX_SCRYPT_N = 1 << 20
MAX_SCRYPT_R = 32
MAX_SCRYPT_P = 16
MAX_SCRYPT_MEMORY = 1 << 30  # 128·n·r bytes


class CostError(ValueError):
    """scrypt parameters past the bounds a key is derived with."""


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


def mac(material: bytes, purpose: bytes, data: bytes) -> bytes:
    """HMAC-SHA256 of `data` under HKDF-SHA256(`material`, no salt, info `purpose`, 32 bytes)."""
    key = HKDF(algorithm=hashes.SHA256(), length=KEY_SIZE, salt=None, info=purpose).derive(material)
    return hmac.digest(key, data, "sha256")


_KdfInputs = tuple[str, bytes, int, int, int]
_ahead: dict[_KdfInputs, Future[bytes]] = {}
_ahead_lock = threading.Lock()


def check_cost(n: int, r: int, p: int) -> None:
    """CostError unless n is a power of two from 2 to 2^20, r is 1 to 32, p is 1 to 16, and
    the derivation's memory, 128·n·r bytes, is at most 1 GiB."""
    if not (2 <= n <= MAX_SCRYPT_N and n & (n - 1) == 0):
        raise CostError(f"n={_power(n)}, where n is a power of two from 2 to 2^20")
    if not 1 <= r <= MAX_SCRYPT_R:
        raise CostError(f"r={r}, where r is 1 to {MAX_SCRYPT_R}")
    if not 1 <= p <= MAX_SCRYPT_P:
        raise CostError(f"p={p}, where p is 1 to {MAX_SCRYPT_P}")
    if 128 * n * r > MAX_SCRYPT_MEMORY:
        raise CostError(
            f"n={_power(n)} and r={r}, {128 * n * r >> 20} MiB of memory, where 1 GiB is the most"
        )


def _power(n: int) -> str:
    """`n` as 2^k when it is a power of two."""
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    check_cost(n, r, p)
    return Scrypt(salt=salt, length=KEY_SIZE, n=n, r=r, p=p).derive(password.encode())


def derive_ahead(password: str, salt: bytes, n: int, r: int, p: int) -> None:
    """Begin `derive_key(password, salt, n, r, p)` in a thread, for its first call to take."""
    inputs = (password, salt, n, r, p)
    derived: Future[bytes] = Future()
    with _ahead_lock:
        if inputs in _ahead:
            return
        _ahead[inputs] = derived

    def run() -> None:
        try:
            derived.set_result(_scrypt(*inputs))
        except BaseException as e:  # handed to derive_key, which raises it
            derived.set_exception(e)

    threading.Thread(target=run, name="key-derivation", daemon=True).start()


def derive_key(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    """A 32-byte key from the password with scrypt (the one begun ahead, if it was)."""
    with _ahead_lock:
        derived = _ahead.pop((password, salt, n, r, p), None)
    if derived is not None:
        return derived.result()
    return _scrypt(password, salt, n, r, p)
