"""The daemon SIGKILLed at seeded random moments of an import, a backup and a restore, and
started again each time, reaches the end a daemon never killed reaches: the disk Ready with
its source's bytes, read once; one backup in the repository; the restored disk equal to it;
no worker left. DISKFERRY_STRESS sets the number of kills (8 by default), DISKFERRY_KILL_SEED
the seed."""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "control"))

from control_support import wait_until, workers_under
from daemon_support import Served, free_port, kubectl, start_daemon

from diskferry.backup.repository import Repository
from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.resources.model import API_VERSION
from diskferry.control.resources.registry import REGISTRY

pytestmark = pytest.mark.stress
KILLS = int(os.environ.get("DISKFERRY_STRESS", "8"))
SEED = int(os.environ.get("DISKFERRY_KILL_SEED", "2026"))
PASSWORD = "kill the daemon"
MiB = 1 << 20
ENDED = ("Ready", "Completed", "Failed", "Canceled", "PartiallyFailed")


class Killer:
    """A `diskferry serve` over one data directory, killed and started again on demand."""

    def __init__(self, data_dir: Path, rnd: random.Random) -> None:
        self.data_dir, self.rnd = data_dir, rnd
        self.port, self.proxy_port = free_port(), free_port()
        self.kills = 0
        self.served = self._start()

    def _start(self) -> Served:
        options = ("--proxy-port", str(self.proxy_port))
        return start_daemon(self.data_dir, self.data_dir.parent / "serve.log", self.port, options)

    def kill_at_random(self, most: float) -> None:
        """SIGKILL the daemon (its workers run on) at a random moment of `most` seconds, and
        start it again."""
        time.sleep(self.rnd.uniform(0.05, most))
        self.served.process.send_signal(signal.SIGKILL)
        self.served.process.wait(30)
        self.kills += 1
        self.served = self._start()

    def objects(self) -> ObjectService:
        """The store, read beside the daemon."""
        return ObjectService(self.data_dir / "state.db", REGISTRY)

    def phase(self, kind: str, name: str) -> str | None:
        """The object's phase as the store has it now."""
        objects = self.objects()
        try:
            found = objects.get(REGISTRY.by_kind(kind), "default", name)
        finally:
            objects.close()
        return (found.get("status") or {}).get("phase")

    def get(self, kind: str, name: str) -> dict[str, Any]:
        """The object as the store has it now."""
        objects = self.objects()
        try:
            return objects.get(REGISTRY.by_kind(kind), "default", name)
        finally:
            objects.close()

    def create(self, *bodies: dict[str, Any]) -> None:
        """Apply `bodies` through the daemon's API, as a user does."""
        for each in bodies:
            kubectl(self.served, "apply", "-f", "-", stdin=json.dumps(each))

    def kill_until(self, ended: Callable[[], bool], most: float) -> None:
        """Kill the daemon at random moments until `ended`, or until KILLS are spent."""
        while not ended() and self.kills < KILLS:
            self.kill_at_random(most)


def body(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


def test_a_daemon_killed_at_random_moments_ends_as_one_never_killed(faulty, tmp_path) -> None:
    rnd = random.Random(SEED)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    source = tmp_path / "source.raw"
    source.write_bytes(os.urandom(4 * MiB))
    url = faulty.add("source.raw", source, piece=128 * 1024, trickle=0.1)
    killer = Killer(data_dir, rnd)
    try:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "repo-pass"},
            "data": {"password": base64.b64encode(PASSWORD.encode()).decode()},
        }
        location = {
            "provider": "filesystem",
            "objectStorage": {"bucket": str(tmp_path / "backups")},
            "encryptionSecretRef": {"name": "repo-pass", "key": "password"},
        }
        vm = {"runPolicy": "AlwaysOff", "blockDeviceRefs": [{"kind": "VirtualDisk", "name": "vd"}]}
        killer.create(
            secret,
            body("BackupStorageLocation", "repo", location),
            body("VirtualDisk", "vd", {"dataSource": {"type": "HTTP", "http": {"url": url}}}),
            body("VirtualMachine", "vm", vm),
            body(
                "DataUpload",
                "up",
                {"backupStorageLocation": "repo"},
                annotations={"diskferry.io/vm-name": "vm"},
            ),
        )
        killer.kill_until(lambda: killer.phase("DataUpload", "up") in ENDED, 1.0)
        upload = wait_until(
            lambda: killer.phase("DataUpload", "up") in ENDED and killer.get("DataUpload", "up"),
            180,
        )
        assert upload["status"]["phase"] == "Completed", upload["status"]
        snapshot = upload["status"]["disks"][0]["snapshotID"]
        killer.create(
            body(
                "DataDownload",
                "dd",
                {
                    "backupStorageLocation": "repo",
                    "snapshotID": snapshot,
                    "targetVolume": {"pvc": "vd-restored", "namespace": "default"},
                },
            )
        )
        killer.kill_until(lambda: killer.phase("DataDownload", "dd") in ENDED, 0.7)
        download = wait_until(
            lambda: (
                killer.phase("DataDownload", "dd") in ENDED and killer.get("DataDownload", "dd")
            ),
            180,
        )
        assert download["status"]["phase"] == "Completed", download["status"]
        disk = wait_until(lambda: killer.phase("VirtualDisk", "vd-restored") == "Ready", 60)
        assert disk

        def claim_bytes(name: str) -> bytes:
            found = killer.get("VirtualDisk", name)["status"]
            claim = found["target"]["persistentVolumeClaimName"]
            path = data_dir / "volumes" / found["storageClassName"] / "default" / f"{claim}.img"
            return path.read_bytes()

        assert claim_bytes("vd") == source.read_bytes()
        assert claim_bytes("vd-restored") == source.read_bytes()
        # the import was read once, by one worker, however often the daemon died
        ranges = [h.get("Range") for h in faulty.seen("source.raw")]
        assert ranges == [None, f"bytes=0-{4 * MiB - 1}"], ranges
        with Repository.open(str(tmp_path / "backups"), PASSWORD) as repo:
            assert [s.id for s in repo.list_snapshots()] == [snapshot]
        assert killer.kills >= 1
    finally:
        killer.served.stop()
    wait_until(lambda: not workers_under(data_dir), 30)
    print(json.dumps({"kills": killer.kills, "seed": SEED}))
