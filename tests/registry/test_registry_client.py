"""The registry client against docker-registry: push and pull, auth, errors, digests."""

from __future__ import annotations

from diskferry.registry.blobs import BlobReader, blob_exists, push_bytes
from diskferry.registry.client import RegistryClient, RegistryOptions
from diskferry.registry.digests import digest_of


def test_small_blob_round_trip(registry):
    client = RegistryClient("%s" % registry.address, "127.0.0.1", RegistryOptions(insecure=True))
    data = b"hello registry\n" * 1000
    digest = digest_of(data)
    assert not blob_exists(client, "t/blob", digest)
    push_bytes(client, "t/blob", data, digest)
    assert blob_exists(client, "t/blob", digest)
    reader = BlobReader(client, "t/blob", digest, len(data))
    got = b""
    while chunk := reader.read(4096):
        got += chunk
    assert got == data
