"""The client: references, bearer tokens, the platform of an index, retries and resumes."""

from __future__ import annotations

import json

import pytest
from conftest import PASSWORD, USER
from servers import flaky_proxy

from diskferry.disk.progress import Progress
from diskferry.registry.auth import Credentials, parse_challenge
from diskferry.registry.blobs import BlobReader, blob_exists, mount_blob
from diskferry.registry.client import RegistryClient, RegistryOptions
from diskferry.registry.containerdisk_push import DiskFile, push_container_disk
from diskferry.registry.destination import RegistryDestination, push_small
from diskferry.registry.digests import digest_of
from diskferry.registry.errors import (
    BadReferenceError,
    BlobUnknownError,
    DeniedError,
    TooManyRequestsError,
    UnauthorizedError,
)
from diskferry.registry.images import OCI_INDEX, put_manifest, resolve
from diskferry.registry.reference import Reference, parse_reference

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("docker://127.0.0.1:5000/disks/a:v1", Reference("127.0.0.1:5000", "disks/a", "v1")),
        ("docker://localhost/a", Reference("localhost", "a")),
        (f"docker://reg.example/a/b@{DIGEST}", Reference("reg.example", "a/b", None, DIGEST)),
        ("docker://alpine:3.19", Reference("registry-1.docker.io", "library/alpine", "3.19")),
        ("docker://kubevirt/fedora", Reference("registry-1.docker.io", "kubevirt/fedora")),
        ("docker://[::1]:5000/x:y", Reference("[::1]:5000", "x", "y")),
    ],
)
def test_references_parse_as_skopeo_writes_them(text, expected):
    assert parse_reference(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "reg/a:b",
        "docker://reg.example/UPPER:v1",
        "docker://reg.example/a@sha256:12",
        "docker://h/a:-x",
    ],
)
def test_bad_references_are_refused(text):
    with pytest.raises(BadReferenceError):
        parse_reference(text)


def test_challenges_parse():
    found = parse_challenge(
        'Bearer realm="https://t/token",service="reg",scope="repository:a:pull"'
    )
    assert found.scheme == "bearer"
    assert found.params == {
        "realm": "https://t/token",
        "service": "reg",
        "scope": "repository:a:pull",
    }
    assert parse_challenge('Basic realm="x"').scheme == "basic"
    assert parse_challenge("Negotiate abc") is None


def _client(registry, **options) -> RegistryClient:
    return RegistryClient(registry.address, "127.0.0.1", RegistryOptions(insecure=True, **options))


def test_bearer_tokens_are_fetched_once_per_scope(token_registry, images, tmp_path):
    registry, issuer = token_registry
    client = _client(registry, credentials=Credentials(USER, PASSWORD))
    ref = parse_reference(registry.ref("tokens/disk:v1"))
    push_container_disk(
        RegistryDestination(client, ref.repository, ref.tag),
        DiskFile(str(images.get("qcow2")), "d.qcow2", "qcow2", 1),
    )
    before = len(issuer.issued)
    image = resolve(client, ref)
    reader = BlobReader(client, ref.repository, image.layers[0]["digest"], image.layers[0]["size"])
    reader.drain()
    reader.close()
    # the push asked one token for pull,push; the pull one for pull, used for every request
    assert issuer.issued[before:] == ["repository:tokens/disk:pull"]
    assert "repository:tokens/disk:pull,push" in issuer.issued[:before]
    assert json.loads(registry.skopeo("inspect", "--raw", str(ref)).stdout)["layers"]


def test_a_token_server_refusing_is_one_line(token_registry):
    registry, _ = token_registry
    client = _client(registry, credentials=Credentials(USER, "not-it"))
    with pytest.raises(UnauthorizedError) as e:
        resolve(client, parse_reference(registry.ref("tokens/disk:v1")))
    assert "refused the credentials given" in e.value.message
    assert "not-it" not in e.value.message


def test_an_index_gives_the_amd64_manifest(registry, images):
    client = _client(registry)
    ref = parse_reference(registry.ref("multi/disk:v1"))
    amd = push_container_disk(
        RegistryDestination(client, ref.repository, "v1"),
        DiskFile(str(images.get("qcow2")), "d.qcow2", "qcow2", 1),
    )
    arm = push_container_disk(
        RegistryDestination(client, ref.repository, "arm"),
        DiskFile(str(images.reference), "d.img", "raw", 1),
    )
    manifests = [
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": d,
            "size": 1,
            "platform": {"os": "linux", "architecture": arch},
        }
        for d, arch in ((arm.digest, "arm64"), (amd.digest, "amd64"))
    ]
    from diskferry.registry.images import get_manifest

    for entry in manifests:
        entry["size"] = len(get_manifest(client, ref.repository, entry["digest"]).body)
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})
    put_manifest(client, ref.repository, "both", index.encode(), OCI_INDEX)
    image = resolve(client, parse_reference(registry.ref("multi/disk:both")))
    assert image.manifest.digest == amd.digest
    assert (
        resolve(
            client, parse_reference(registry.ref("multi/disk:both")), "linux/arm64"
        ).manifest.digest
        == arm.digest
    )


def test_5xx_answers_are_retried(registry):
    with flaky_proxy(f"http://{registry.address}") as (address, faults):
        client = RegistryClient(address, "127.0.0.1", RegistryOptions(insecure=True, backoff=0.01))
        data = b"retried blob\n" * 5000
        faults.errors = {"HEAD": 2, "POST": 1, "PATCH": 1, "PUT": 1}
        push_small(RegistryDestination(client, "retry/blob", "t"), data, digest_of(data))
        assert faults.errors == {"HEAD": 0, "POST": 0, "PATCH": 0, "PUT": 0}
        assert blob_exists(client, "retry/blob", digest_of(data))


def test_a_broken_blob_read_resumes_with_range(registry, images):
    data = images.reference.read_bytes()[: 3 << 20]
    digest = digest_of(data)
    push_small(RegistryDestination(_client(registry), "resume/blob", "t"), data, digest)
    with flaky_proxy(f"http://{registry.address}") as (address, faults):
        client = RegistryClient(address, "127.0.0.1", RegistryOptions(insecure=True, backoff=0.01))
        faults.cut_blob_after = 1_000_000
        progress = Progress()
        reader = BlobReader(client, "resume/blob", digest, len(data), progress=progress)
        got = bytearray()
        while chunk := reader.read(1 << 16):
            got += chunk
        reader.close()
    assert bytes(got) == data
    assert reader.resumes == 1
    assert ("GET", f"/v2/resume/blob/blobs/{digest}", "bytes=1000000-") in faults.seen
    assert progress.done == len(data)


def test_a_blob_mounts_across_repositories_with_both_scopes(token_registry):
    registry, issuer = token_registry
    client = _client(registry, credentials=Credentials(USER, PASSWORD))
    data = b"mounted blob\n" * 3000
    digest = digest_of(data)
    push_small(RegistryDestination(client, "mount/from", "t"), data, digest)
    assert not blob_exists(client, "mount/to", digest)
    assert mount_blob(client, "mount/to", digest, "mount/from")
    assert blob_exists(client, "mount/to", digest)
    assert "repository:mount/to:pull,push repository:mount/from:pull" in issuer.issued
    other = digest_of(b"never pushed")
    assert not mount_blob(client, "mount/to", other, "mount/from")
    assert not blob_exists(client, "mount/to", other)


def test_a_layer_the_registry_has_is_not_sent_again(registry, images):
    disk = DiskFile(str(images.get("qcow2")), "d.qcow2", "qcow2", 1)
    with flaky_proxy(f"http://{registry.address}") as (address, faults):
        client = RegistryClient(address, "127.0.0.1", RegistryOptions(insecure=True))
        first = push_container_disk(RegistryDestination(client, "again/a", "v1"), disk)
        patches = sum(1 for method, _, _ in faults.seen if method == "PATCH")
        assert patches >= 2  # the layer and the config
        faults.seen.clear()
        again = push_container_disk(RegistryDestination(client, "again/a", "v2"), disk)
    assert again.digest == first.digest
    assert [m for m, _, _ in faults.seen if m in ("POST", "PATCH")] == []
    assert ("HEAD", f"/v2/again/a/blobs/{first.layer_digest}", None) in faults.seen


def test_a_token_is_kept_until_it_expires(token_registry, monkeypatch):
    registry, issuer = token_registry
    now = [1000.0]
    client = RegistryClient(
        registry.address,
        "127.0.0.1",
        RegistryOptions(insecure=True, credentials=Credentials(USER, PASSWORD)),
        clock=lambda: now[0],
    )
    scope = "repository:expiry/disk:pull"
    monkeypatch.setattr(issuer, "lifetime", 60)
    client.request("GET", "/v2/expiry/disk/tags/list", scope=scope, what="t", ok=(200, 404))
    assert issuer.issued.count(scope) == 1
    now[0] += 50
    first = client.auth_headers(scope)
    assert client.auth_headers(scope) == first
    assert issuer.issued.count(scope) == 1
    now[0] += 10  # past its 60 s, less the margin
    assert client.auth_headers(scope) != first
    assert issuer.issued.count(scope) == 2


def test_an_unknown_blob_is_blob_unknown(registry):
    missing = digest_of(b"not there")
    with pytest.raises(BlobUnknownError) as e:
        BlobReader(_client(registry), "absent/blob", missing)
    assert e.value.message == (
        f"{registry.address}/absent/blob@{missing}: blob unknown to registry (BLOB_UNKNOWN)"
    )


@pytest.mark.parametrize(
    ("status", "code", "kind", "tries"),
    [(429, "TOOMANYREQUESTS", TooManyRequestsError, 3), (403, "DENIED", DeniedError, 1)],
)
def test_registry_errors_are_one_line(registry, status, code, kind, tries):
    with flaky_proxy(f"http://{registry.address}") as (address, faults):
        options = RegistryOptions(insecure=True, backoff=0.01, retries=2)
        client = RegistryClient(address, "127.0.0.1", options)
        faults.status = status
        faults.body = json.dumps(
            {"errors": [{"code": code, "message": "said the registry"}]}
        ).encode()
        faults.errors = {"GET": 10}
        with pytest.raises(kind) as e:
            resolve(client, parse_reference(f"docker://{address}/errors/disk:v1"))
    assert e.value.message == f"docker://{address}/errors/disk:v1: said the registry ({code})"
    assert faults.errors["GET"] == 10 - tries
