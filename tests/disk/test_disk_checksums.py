"""User checksums of a stream."""

from __future__ import annotations

import hashlib

import pytest

from diskferry.disk.checksums import ALGORITHMS, Checksum, ChecksumError

DATA = b"a disk image" * 10_000


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_matching_checksum(algo):
    digest = hashlib.new(algo, DATA).hexdigest()
    c = Checksum(f"{algo.upper()}:{digest.upper()}")
    for pos in range(0, len(DATA), 7777):
        c.update(DATA[pos : pos + 7777])
    assert c.verify() == f"{algo}:{digest}"


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_mismatch(algo):
    wrong = hashlib.new(algo, b"other").hexdigest()
    c = Checksum(f"{algo}:{wrong}")
    c.update(DATA)
    with pytest.raises(ChecksumError) as e:
        c.verify()
    actual = hashlib.new(algo, DATA).hexdigest()
    assert e.value.message == f"{algo} checksum mismatch: expected {wrong}, got {actual}"
    assert e.value.reason == "ChecksumMismatch"


@pytest.mark.parametrize(
    "spec", ["", "sha256", "sha256:", "crc32:abcd", "md5:" + "g" * 32, "sha1:" + "a" * 39]
)
def test_malformed(spec):
    with pytest.raises(ChecksumError) as e:
        Checksum(spec)
    assert e.value.reason == "BadChecksum"
