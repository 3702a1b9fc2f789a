"""`image serve`: the store as a registry that skopeo and diskferry read and write."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

TOKEN = "store-token-8b1f"


@pytest.fixture
def store(tmp_path):
    """`diskferry image serve` on a free port, with a token file; its address and root."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    root = tmp_path / "store"
    exe = Path(sys.executable).with_name("diskferry")
    proc = subprocess.Popen(
        [str(exe), "image", "serve", str(root), "--port", str(port), "--token-file", str(token)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )
    try:
        proc.stderr.readline()  # "serving ... at ..."
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"127.0.0.1:{port}", root
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_store_serves_skopeo_and_diskferry(store, diskferry, images, tmp_path):
    address, root = store
    ref = f"docker://{address}/vms/disk:v1"
    creds = f"any:{TOKEN}"
    pushed = diskferry(
        "image", "push", images.get("qcow2"), ref, "--insecure", "--creds", creds, "--json"
    )
    assert pushed.code == 0, pushed.stderr
    assert (root / "vms" / "disk" / "oci-layout").is_file()
    skopeo = ["skopeo", "--insecure-policy"]
    inspect = subprocess.run(
        [*skopeo, "inspect", "--raw", "--tls-verify=false", f"--creds={creds}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    assert inspect.returncode == 0, inspect.stderr
    assert len(json.loads(inspect.stdout)["layers"]) == 1
    copy = subprocess.run(
        [
            *skopeo,
            "copy",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            f"--src-creds={creds}",
            f"--dest-creds={creds}",
            ref,
            f"docker://{address}/vms/copy:v2",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert copy.returncode == 0, copy.stderr
    target = tmp_path / "disk.raw"
    pulled = diskferry(
        "import",
        f"docker://{address}/vms/copy:v2",
        target,
        "--insecure",
        "--creds",
        creds,
        "--no-progress",
    )
    assert pulled.code == 0, pulled.stderr
    assert images.same(images.reference, target)


def test_the_store_wants_its_token(store, refuse):
    address, _ = store
    error = refuse(f"docker://{address}/vms/disk:v1", "--insecure", "--creds", "any:wrong")
    assert "refused the credentials given" in error
    assert "wrong" not in error
