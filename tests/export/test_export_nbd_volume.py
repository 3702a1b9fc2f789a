"""An export of an NBD volume with a dirty bitmap: map shows what changed, data serves bytes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from export_support import TOKEN, MiB, curl

AUTH = f"x-kubevirt-export-token: {TOKEN}"


@pytest.fixture
def nbd_socket(tmp_path: Path) -> Iterator[Path]:
    """qemu-nbd serving a qcow2 whose bitmap b0 saw one 64 KiB write at 1 MiB."""
    image = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(image), "16M"], check=True)
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", "write -P 7 4M 1M", str(image)],
        check=True,
        capture_output=True,
    )
    subprocess.run(["qemu-img", "bitmap", "--add", str(image), "b0"], check=True)
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", "write -P 1 1M 64k", str(image)],
        check=True,
        capture_output=True,
    )
    sock = tmp_path / "nbd.sock"
    server = subprocess.Popen(
        [
            "qemu-nbd",
            "--persistent",
            "--read-only",
            "--format=qcow2",
            "--bitmap=b0",
            f"--socket={sock}",
            str(image),
        ]
    )
    try:
        while not sock.exists():
            assert server.poll() is None, "qemu-nbd did not start"
            time.sleep(0.05)
        yield sock
    finally:
        server.terminate()
        server.wait(10)


def test_map_shows_the_dirty_runs_and_data_serves_them(export_factory, nbd_socket: Path) -> None:
    url = f"nbd+unix:///?socket={nbd_socket}"
    r = export_factory({"disk": url}, "--bitmap", "disk=b0")

    def get(path: str) -> bytes:
        p = curl("-f", "-H", AUTH, r.url + path, ca=r.ca)
        assert p.returncode == 0, p.stderr
        return p.stdout

    dirty = json.loads(get("/exports/disk/map"))["extents"]
    assert [e for e in dirty if e["type"] == "dirty"] == [
        {"offset": MiB, "length": 64 << 10, "type": "dirty"}
    ]
    allocation = json.loads(get("/exports/disk/map?context=zero"))["extents"]
    data = [(e["offset"], e["length"]) for e in allocation if e["type"] == "data"]
    assert (4 * MiB, MiB) in data
    assert get(f"/exports/disk/data?offset={MiB}&length=65536") == b"\x01" * 65536
    whole = get("/volumes/disk/disk.img")
    assert len(whole) == 16 * MiB and whole[4 * MiB : 5 * MiB] == b"\x07" * MiB


def test_a_fleecing_export_of_a_backup_session_maps_its_dirty_runs(
    export_factory, tmp_path: Path
) -> None:
    from diskferry.qemu import cbt
    from diskferry.qemu.session import BackupSession, SessionDisk

    volume = tmp_path / "vm.raw"
    with open(volume, "wb") as f:
        f.truncate(16 * MiB)
    overlay = cbt.enable(str(volume)).overlay
    with BackupSession([SessionDisk("root", str(volume))], "exporttest") as session:
        first = session.start({})[0].checkpoint
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", "write -P 9 3M 128k", str(overlay)],
        check=True,
        capture_output=True,
    )
    with BackupSession([SessionDisk("root", str(volume))], "exporttest") as session:
        export = session.start({"root": first})[0]
        assert export.mode == "incremental" and export.bitmap
        r = export_factory({"disk": export.url}, "--bitmap", f"disk={export.bitmap}")
        try:
            p = curl("-f", "-H", AUTH, r.url + "/exports/disk/map", ca=r.ca)
            assert p.returncode == 0, p.stderr
            dirty = [e for e in json.loads(p.stdout)["extents"] if e["type"] == "dirty"]
            assert dirty == [{"offset": 3 * MiB, "length": 128 << 10, "type": "dirty"}]
            p = curl(
                "-f",
                "-H",
                AUTH,
                r.url + f"/exports/disk/data?offset={3 * MiB}&length=4096",
                ca=r.ca,
            )
            assert p.stdout == b"\x09" * 4096
        finally:
            r.stop()
