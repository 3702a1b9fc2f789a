"""Basic auth over TLS with a private CA: --creds, auth files, and the one-line refusals."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest
from conftest import PASSWORD, USER

from diskferry.registry.client import RegistryClient, RegistryOptions
from diskferry.registry.errors import RegistryError


@pytest.fixture(scope="module")
def pushed(basic_registry, images, tls, tmp_path_factory):
    """A containerDisk pushed with --creds; its reference."""
    from diskferry.disk.progress import Progress
    from diskferry.importer.image_push import push_image
    from diskferry.importer.job import ImportJob

    ref = basic_registry.ref("secure/disk:v1")
    job = ImportJob(
        source=str(images.get("qcow2")),
        target="-",
        format="qcow2",
        ca_bundle=str(tls.ca),
        creds=f"{USER}:{PASSWORD}",
    )
    push_image(job, ref, Progress())
    return ref


def test_creds_and_the_ca_bundle_pull(diskferry, pushed, basic_registry, images, tls, tmp_path):
    target = tmp_path / "disk.raw"
    result = diskferry(
        "image",
        "pull",
        pushed,
        target,
        "--ca-bundle",
        tls.ca,
        "--creds",
        f"{USER}:{PASSWORD}",
        "--no-progress",
    )
    assert result.code == 0, result.stderr
    assert images.same(images.reference, target)
    [layer] = json.loads(basic_registry.skopeo("inspect", "--raw", pushed).stdout)["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"


def test_an_auth_file_gives_the_credentials(
    diskferry, pushed, basic_registry, images, tls, tmp_path
):
    authfile = tmp_path / "config.json"
    pair = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    authfile.write_text(json.dumps({"auths": {basic_registry.address: {"auth": pair}}}))
    target = tmp_path / "disk.raw"
    result = diskferry(
        "import", pushed, target, "--ca-bundle", tls.ca, "--authfile", authfile, "--no-progress"
    )
    assert result.code == 0, result.stderr
    assert images.same(images.reference, target)


def test_no_credentials_is_one_line(pushed, basic_registry, refuse, tls):
    error = refuse(pushed, "--ca-bundle", str(tls.ca))
    assert error == f"{basic_registry.address} asks for credentials (give --creds or --authfile)"


def test_a_wrong_password_is_unauthorized_and_not_echoed(pushed, refuse, tls):
    error = refuse(pushed, "--ca-bundle", str(tls.ca), "--creds", f"{USER}:wrong-password")
    assert "(UNAUTHORIZED)" in error
    assert "wrong-password" not in error


def test_an_unknown_ca_fails_verification(pushed, refuse):
    error = refuse(pushed, "--creds", f"{USER}:{PASSWORD}")
    assert "TLS verification failed" in error


def test_insecure_is_for_loopback_only():
    with pytest.raises(RegistryError, match="only for a registry on loopback"):
        RegistryClient(
            "registry.example.com", "registry.example.com", RegistryOptions(insecure=True)
        )
    assert RegistryClient("[::1]:5000", "::1", RegistryOptions(insecure=True)).base == (
        "http://[::1]:5000"
    )


def test_the_import_worker_reads_a_containerdisk_with_an_auth_file(
    pushed, basic_registry, images, tls, tmp_path
):
    authfile = tmp_path / "auth.json"
    pair = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    authfile.write_text(
        json.dumps({"auths": {f"https://{basic_registry.address}": {"auth": pair}}})
    )
    target = tmp_path / "disk.raw"
    job = {
        "source": pushed,
        "target": str(target),
        "caBundle": str(tls.ca),
        "authfile": str(authfile),
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    proc = subprocess.run(
        [sys.executable, "-m", "diskferry.importer.worker", str(tmp_path / "job.json")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["digest"].startswith("sha256:")
    assert images.same(images.reference, target)
    assert PASSWORD not in proc.stderr + proc.stdout
