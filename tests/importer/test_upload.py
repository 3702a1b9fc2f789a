"""The upload server against curl (as CDI's and virtctl's users send) and diskferry's client:
byte-exact uploads, every refusal, and uploads that break leave the target as it was."""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from upload_support import TOKEN, PartialUpload, UploadSetup, bearer, curl


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[UploadSetup]:
    """A CA, the token, and a target holding ORIGINAL."""
    setup = UploadSetup.made_in(tmp_path)
    yield setup
    setup.stop_servers()


def _result(server) -> dict:
    out, _ = server.proc.communicate(timeout=120)
    assert server.proc.returncode == 0, server.log.read_text()
    return json.loads(out.splitlines()[-1])


def test_curl_data_binary_qcow2_gz_to_upload_async_lands_byte_exact(setup, images) -> None:
    server = setup.serve("--json")
    image = images.get("qcow2", "gzip")
    code, _ = curl(server, "/v1beta1/upload-async", *bearer(), "--data-binary", f"@{image}")
    assert code == 200
    result = _result(server)
    assert (result["uploaded"]["sourceFormat"], result["uploaded"]["compression"]) == (
        "qcow2",
        "gzip",
    )
    assert images.same(setup.target, images.reference)


@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1"])
def test_curl_form_upload_lands_byte_exact(setup, images, version: str) -> None:
    server = setup.serve()
    form = f"file=@{images.get('qcow2')}"
    code, body = curl(server, f"/{version}/upload-form", *bearer(), "-F", form)
    assert code == 200, body
    server.proc.wait(60)
    assert images.same(setup.target, images.reference)


def test_client_and_server_say_what_is_wrong_in_one_line(setup, images, diskferry) -> None:
    server = setup.serve("--keep-serving")
    wrong = setup.token_file.with_name("wrong")
    wrong.write_text("not-it\n")
    refused = diskferry(
        "upload", images.get("raw"), server.url, "--token-file", wrong, "--ca-bundle", server.ca
    )
    assert refused.code == 1
    assert "HTTP 401" in refused.error and "wrong or has expired" in refused.error
    assert "not-it" not in refused.stderr
    server.stop()
    setup.token_file.write_text("")
    empty = diskferry(
        "upload",
        "serve",
        setup.target,
        "--token-file",
        setup.token_file,
        "--cert-dir",
        setup.ca_dir,
        "--port",
        "0",
    )
    assert (empty.code, empty.error) == (
        1,
        f"the token file {setup.token_file} is empty: write a token into it",
    )
    assert setup.untouched()


def test_diskferry_client_uploads_to_the_sync_path(setup, images, diskferry) -> None:
    server = setup.serve()
    image = images.get("raw", "xz")
    done = diskferry(
        "upload", image, server.url, "--token-file", setup.token_file, "--ca-bundle", server.ca
    )
    assert done.code == 0, done.stderr
    assert server.proc.wait(60) == 0
    assert images.same(setup.target, images.reference)


def test_deckhouse_secret_path(setup, images, diskferry) -> None:
    server = setup.serve("--keep-serving")
    url = f"{server.url}/upload/guessed-secret"
    refused = diskferry("upload", images.get("raw"), url, "--ca-bundle", server.ca)
    assert refused.code == 1
    assert "HTTP 404" in refused.error and "guessed-secret" not in refused.stderr
    assert curl(server, f"/upload/{TOKEN}")[0] == 200
    assert curl(server, "/upload/not-the-secret")[0] == 404
    assert curl(server, "/upload/not-the-secret", "-T", str(images.get("raw")))[0] == 404
    assert curl(server, f"/upload/{TOKEN}", "-T", str(images.get("vmdk")))[0] == 200
    assert images.same(setup.target, images.reference)
    assert curl(server, f"/upload/{TOKEN}")[0] == 409
    server.stop()
    assert TOKEN not in server.log.read_text()


def test_every_refusal_code(setup, images, tmp_path: Path) -> None:
    server = setup.serve("--keep-serving")
    image = f"@{images.get('qcow2')}"
    path = "/v1beta1/upload"
    assert curl(server, path, "--data-binary", image)[0] == 400
    assert curl(server, path, "-H", "Authorization: Basic eDp5", "--data-binary", image)[0] == 400
    assert curl(server, path, "-H", "Authorization: Bearer", "--data-binary", image)[0] == 400
    assert curl(server, path, *bearer("wrong"), "--data-binary", image)[0] == 401
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)
    setup.token_file.write_text(f"{TOKEN}\n{past.isoformat()}\n")
    assert curl(server, path, *bearer(), "--data-binary", image)[0] == 401
    setup.token_file.write_text(f"{TOKEN}\n{(past + datetime.timedelta(hours=1)).isoformat()}\n")
    for probe in ("/v1beta1/upload-async", "/v1alpha1/upload-form-async"):
        assert curl(server, probe, "-I")[0] == 200
    assert curl(server, path)[0] == 405
    form = "/v1beta1/upload-form"
    assert curl(server, form, *bearer(), "--data-binary", image)[0] == 400
    assert curl(server, form, *bearer(), "-F", f"other={image}")[0] == 400
    assert setup.untouched()

    size = images.get("qcow2").stat().st_size
    running = PartialUpload(server, path, size)
    data = images.get("qcow2").read_bytes()
    running.send(data[: size // 2])
    _wait_until(lambda: curl(server, f"/upload/{TOKEN}")[0] == 503)
    assert curl(server, "/v1alpha1/upload", *bearer(), "--data-binary", image)[0] == 503
    running.send(data[size // 2 :])
    assert running.status() == 200
    assert images.same(setup.target, images.reference)
    assert curl(server, path, *bearer(), "--data-binary", image)[0] == 409
    server.stop()
    assert TOKEN not in server.log.read_text()


def test_a_client_gone_halfway_leaves_the_target_and_the_next_upload_works(setup, images) -> None:
    server = setup.serve("--keep-serving")
    data = images.get("raw", "gzip").read_bytes()
    broken = PartialUpload(server, "/v1beta1/upload", len(data))
    broken.send(data[: len(data) // 2])
    broken.drop()
    _wait_until(lambda: "upload failed" in server.log.read_text())
    assert setup.untouched()
    code, _ = curl(
        server, "/v1beta1/upload", *bearer(), "--data-binary", f"@{images.get('raw', 'gzip')}"
    )
    assert code == 200
    assert images.same(setup.target, images.reference)


def test_an_image_with_a_backing_file_is_refused(setup, images, tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-f", "qcow2", "-b", images.reference, "-F", "raw", overlay],
        check=True,
        capture_output=True,
    )
    server = setup.serve("--keep-serving")
    code, body = curl(server, "/v1beta1/upload", *bearer(), "--data-binary", f"@{overlay}")
    assert code == 400
    assert "backing file" in body
    assert setup.untouched()
    code, _ = curl(
        server, "/v1beta1/upload-form-async", *bearer(), "-F", f"file=@{images.get('qcow2')}"
    )
    assert code == 200
    _wait_until(lambda: "upload complete" in server.log.read_text())
    assert images.same(setup.target, images.reference)


def _wait_until(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)
