"""A backup read from a backup point's endpoints, as KubeVirt serves a Pull
VirtualMachineBackup's (here served by diskferry's backup-point worker, which serves the same):
a full point read where its map says there is data, then an incremental one of exactly the
runs written since, each restoring byte for byte; a point whose maps are not of the
repository's last checkpoint read whole; a token that is not the point's fails the backup."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from backup_support import Engine, KiB, MiB, engine_fixture, make_disk, write_random

from diskferry.backup.engine import run_backup
from diskferry.backup.job import BackupJob, BackupPoint, PointDisk
from diskferry.disk.http import HttpError
from diskferry.disk.progress import Progress
from diskferry.export.backuppoint import BackupPointJob, serve_backup_point
from diskferry.serving.certs import create_ca

__all__ = ["engine_fixture"]
TOKEN = "point-token"
HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


class Served:
    """A backup point of `volume` served in a thread until stopped; what it says of itself."""

    def __init__(self, root: Path, volume: str, since: str | None = None) -> None:
        self.port = _free_port()
        self.since = since
        self.ca_dir = root / f"ca-{self.port}"
        create_ca(self.ca_dir)
        self.token_file = root / f"token-{self.port}"
        self.token_file.write_text(TOKEN)
        self.point_file = root / f"point-{self.port}.json"
        job = BackupPointJob.model_validate(
            {
                "name": "vm",
                "volumes": [{"name": "vda", "path": volume}],
                "chain": "tracker1",
                "since": since,
                "tokenFile": str(self.token_file),
                "grace": 1,
                "certDir": str(self.ca_dir),
                "sans": [HOST],
                "listenAddress": HOST,
                "listenPort": self.port,
                "pointFile": str(self.point_file),
            }
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=serve_backup_point, args=(job, Progress(), self.stop), daemon=True
        )
        self.thread.start()

    def point(self, token_file: Path | None = None) -> BackupPoint:
        """The point as a backup job names it, once its server answers."""
        deadline = time.monotonic() + 30
        while not self.point_file.exists() or not self._listening():
            assert time.monotonic() < deadline and self.thread.is_alive()
            time.sleep(0.05)
        made: dict[str, Any] = json.loads(self.point_file.read_text())
        disk = made["disks"][0]
        base = f"https://{HOST}:{self.port}/exports/vda"
        return BackupPoint(
            disks=[
                PointDisk(
                    name="vda",
                    data=f"{base}/data",
                    map=f"{base}/map",
                    since=self.since if disk["mode"] == "incremental" else None,
                )
            ],
            tokenFile=str(token_file or self.token_file),
            caFile=str(self.ca_dir / "ca.crt"),
            checkpoint=disk["checkpoint"],
        )

    def _listening(self) -> bool:
        with socket.socket() as probe:
            return probe.connect_ex((HOST, self.port)) == 0

    def end(self) -> None:
        """Stop serving (the point's checkpoint stays on the disk)."""
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def from_point(engine: Engine, point: BackupPoint) -> Any:
    """Back up the point as VM `vm`."""
    return run_backup(BackupJob(repo=engine.url, vm="vm", point=point), Progress())


def test_full_then_incremental_from_the_points_endpoints(engine: Engine, tmp_path: Path) -> None:
    volume = make_disk(tmp_path / "disk.raw")
    overlay = volume + ".cbt.qcow2"
    served = Served(tmp_path, volume)
    point = served.point()
    full = from_point(engine, point)
    served.end()
    disk = full.disks[0]
    assert (disk.type, disk.cbt, disk.checkpoint) == ("full", True, point.checkpoint)
    assert disk.bytes_read == 4 * MiB + 16 * KiB  # the data runs, in whole blocks, no more
    engine.keep(disk.snapshot, volume)
    assert engine.restores_exactly(disk.snapshot)

    write_random(overlay, 8 * MiB, 64 * KiB)
    write_random(overlay, 20 * MiB + 64 * KiB, 128 * KiB)
    served = Served(tmp_path, volume, since=point.checkpoint)
    later = served.point()
    assert later.disks[0].since == point.checkpoint
    incremental = from_point(engine, later)
    served.end()
    disk = incremental.disks[0]
    assert disk.type == "incremental", disk.reason
    assert disk.reason == f"changes since checkpoint {point.checkpoint}"
    assert disk.bytes_read == 192 * KiB  # exactly the runs written
    engine.keep(disk.snapshot, volume)
    assert engine.restores_exactly(disk.snapshot)


def test_a_point_of_changes_since_another_checkpoint_is_read_whole(
    engine: Engine, tmp_path: Path
) -> None:
    volume = make_disk(tmp_path / "disk.raw")
    served = Served(tmp_path, volume)
    first = served.point()
    from_point(engine, first)
    served.end()
    write_random(volume + ".cbt.qcow2", 2 * MiB, 64 * KiB)
    served = Served(tmp_path, volume, since=first.checkpoint)
    point = served.point()
    elsewhere = [point.disks[0].model_copy(update={"since": "diskferry-other-1"})]
    result = from_point(engine, point.model_copy(update={"disks": elsewhere}))
    served.end()
    disk = result.disks[0]
    assert disk.type == "full"
    assert "since checkpoint diskferry-other-1, not since" in disk.reason
    assert disk.bytes_read == 32 * MiB  # its map says nothing of zeros: every byte is read
    engine.keep(disk.snapshot, volume)
    assert engine.restores_exactly(disk.snapshot)


def test_a_token_that_is_not_the_points_fails_the_backup(engine: Engine, tmp_path: Path) -> None:
    volume = make_disk(tmp_path / "disk.raw")
    served = Served(tmp_path, volume)
    wrong = tmp_path / "wrong-token"
    wrong.write_text("not-the-token")
    with pytest.raises(HttpError, match="401") as failed:
        from_point(engine, served.point(token_file=wrong))
    served.end()
    assert "not-the-token" not in str(failed.value)
