"""A backup point served by the export engine: a stopped CBT disk checkpointed by a session of
its own, its data and map served with the token until the TTL; full, then incremental of
exactly the written runs; a point stopped early keeps the older checkpoint."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from export_support import TOKEN, MiB

from diskferry.disk.progress import Progress
from diskferry.export.backuppoint import BackupPointJob, serve_backup_point
from diskferry.export.token import TOKEN_HEADER
from diskferry.qemu import cbt

KiB = 1024
CHAIN = "c1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Point:
    """A backup point served in a thread: its URL, its point file, and its result at the end."""

    def __init__(self, tmp: Path, ca_dir: Path, token: Path, volume: str, **fields: Any) -> None:
        self.port = free_port()
        self.point_file = tmp / f"point-{self.port}.json"
        self.job = BackupPointJob.model_validate(
            {
                "name": "p1",
                "volumes": [{"name": "vda", "path": volume}],
                "chain": CHAIN,
                "tokenFile": str(token),
                "grace": 1,
                "certDir": str(ca_dir),
                "sans": ["127.0.0.1"],
                "listenAddress": "127.0.0.1",
                "listenPort": self.port,
                "pointFile": str(self.point_file),
                **fields,
            }
        )
        self.ca = (ca_dir / "ca.crt").read_text()
        self.stop = threading.Event()
        self.result: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.result = serve_backup_point(self.job, Progress(), self.stop)

    def get(self, path: str) -> bytes:
        """GET `path` with the token, once the server answers."""
        context = ssl.create_default_context(cadata=self.ca)
        request = urllib.request.Request(
            f"https://127.0.0.1:{self.port}{path}", headers={TOKEN_HEADER: TOKEN}
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(request, context=context, timeout=10) as response:
                    return response.read()
            except OSError:
                if time.monotonic() > deadline or not self.thread.is_alive():
                    raise
                time.sleep(0.1)

    def point(self) -> dict[str, Any]:
        """What the point file says, once written."""
        deadline = time.monotonic() + 30
        while not self.point_file.exists():
            assert time.monotonic() < deadline and self.thread.is_alive()
            time.sleep(0.05)
        return json.loads(self.point_file.read_text())

    def ended(self) -> dict[str, Any]:
        """The result, once the point stopped being served."""
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.result


def bitmaps(overlay: str) -> list[str]:
    """The names of the overlay's diskferry checkpoints of the chain."""
    proc = subprocess.run(
        ["qemu-img", "info", "--force-share", "--output=json", overlay],
        check=True,
        capture_output=True,
        text=True,
    )
    data = json.loads(proc.stdout)["format-specific"]["data"]
    return sorted(b["name"] for b in data.get("bitmaps", []) if CHAIN in b["name"])


def write(overlay: str, pattern: int, offset: int, length: int) -> None:
    """Write through the overlay, as a guest would, so that its bitmaps see it."""
    command = f"write -P {pattern} {offset} {length}"
    subprocess.run(
        ["qemu-io", "-f", "qcow2", "-c", command, overlay], check=True, capture_output=True
    )


def cbt_disk(tmp_path: Path) -> cbt.CbtDisk:
    volume = tmp_path / "disk.raw"
    with open(volume, "wb") as f:
        f.truncate(16 * MiB)
        f.seek(1 * MiB)
        f.write(b"\x11" * (192 * KiB))
    return cbt.enable(str(volume))


def test_full_then_incremental_of_exactly_the_written_runs(
    tmp_path: Path, ca_dir: Path, token_file: Path
) -> None:
    disk = cbt_disk(tmp_path)
    assert disk.overlay is not None
    full = Point(tmp_path, ca_dir, token_file, disk.volume, ttl=3)
    assert full.point()["type"] == "Full"
    assert full.get("/exports/vda/data") == Path(disk.volume).read_bytes()
    result = full.ended()
    assert result["ended"] == "expired" and result["type"] == "Full"
    first = result["disks"][0]["checkpoint"]
    assert bitmaps(disk.overlay) == [first]

    write(disk.overlay, 0x22, 4 * MiB, 64 * KiB)
    write(disk.overlay, 0x33, 9 * MiB, 128 * KiB)
    incremental = Point(tmp_path, ca_dir, token_file, disk.volume, ttl=3, since=first)
    assert incremental.point()["disks"][0]["mode"] == "incremental"
    page = json.loads(incremental.get("/exports/vda/map"))
    dirty = [(e["offset"], e["length"]) for e in page["extents"] if e["type"] == "dirty"]
    assert dirty == [(4 * MiB, 64 * KiB), (9 * MiB, 128 * KiB)]
    assert incremental.get(f"/exports/vda/data?offset={9 * MiB}&length=4096") == b"\x33" * 4096
    result = incremental.ended()
    assert result["type"] == "Incremental"
    assert bitmaps(disk.overlay) == [result["disks"][0]["checkpoint"]] != [first]


def test_a_point_stopped_early_keeps_the_older_checkpoint(
    tmp_path: Path, ca_dir: Path, token_file: Path
) -> None:
    disk = cbt_disk(tmp_path)
    assert disk.overlay is not None
    first = Point(tmp_path, ca_dir, token_file, disk.volume, ttl=1).ended()["disks"][0]
    unknown = Point(tmp_path, ca_dir, token_file, disk.volume, ttl=60, since="diskferry-c1-9")
    assert unknown.point()["type"] == "Full"  # a checkpoint the disk lacks: served whole
    unknown.stop.set()
    result = unknown.ended()
    assert result["ended"] == "stopped"
    assert first["checkpoint"] in bitmaps(disk.overlay)
    assert len(bitmaps(disk.overlay)) == 2
