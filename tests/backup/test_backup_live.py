"""Live backups while a writer keeps writing through the running QEMU: each point is one instant."""

import random
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_support import KiB, MiB, engine_fixture  # noqa: F401

from diskferry.nbd.open import open_volume
from diskferry.qemu import cbt
from diskferry.qemu.storage_daemon import DaemonDisk, StorageDaemon

BLOCK = 64 * KiB
BLOCKS = 256  # a 16 MiB disk


@pytest.fixture
def running_vm(tmp_path: Path) -> Iterator[tuple[StorageDaemon, str, str]]:
    """qemu-storage-daemon serving a CBT disk, writable over NBD: the daemon, URL and volume."""
    volume = tmp_path / "disk.raw"
    with open(volume, "wb") as f:
        f.truncate(BLOCKS * BLOCK)
    disk = cbt.enable(str(volume))
    assert disk.overlay is not None
    daemon = StorageDaemon([DaemonDisk("vmdisk", disk.overlay)]).start()
    daemon.qmp.command(
        "block-export-add", type="nbd", id="vm", node_name="vmdisk", name="vm", writable=True
    )
    daemon.release_monitor()
    yield daemon, f"nbd+unix:///vm?socket={daemon.nbd_socket}", str(volume)
    daemon.stop()


class Writer:
    """Writes whole blocks stamped with a rising sequence number, one at a time, and logs them."""

    def __init__(self, url: str) -> None:
        self.volume = open_volume(url, writable=True)
        self.log: list[int] = [-1]  # log[seq] = block written by write number seq
        self.stop = threading.Event()
        self.rnd = random.Random(5)
        self.thread = threading.Thread(target=self.run)

    def write_one(self) -> None:
        seq, block = len(self.log), self.rnd.randrange(BLOCKS)
        self.volume.write(block * BLOCK, struct.pack("<Q", seq) * (BLOCK // 8))
        self.log.append(block)

    def run(self) -> None:
        while not self.stop.is_set():
            self.write_one()

    def __enter__(self) -> "Writer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.volume.close()


def wait_for(writer: Writer, writes: int) -> None:
    """Wait until the writer has made `writes` writes."""
    while len(writer.log) < writes:
        time.sleep(0.001)


def assert_one_instant(image: bytes, log: list[int]) -> int:
    """The restored image holds, for some cut T, the last write at or before T of each block."""
    found = []
    for b in range(BLOCKS):
        block = image[b * BLOCK : (b + 1) * BLOCK]
        (seq,) = struct.unpack_from("<Q", block)
        assert block == struct.pack("<Q", seq) * (BLOCK // 8), f"block {b} is torn"
        assert seq == 0 or log[seq] == b, f"block {b} holds write {seq} of another block"
        found.append(seq)
    cut = max(found)
    last = [0] * BLOCKS
    for seq in range(1, cut + 1):
        last[log[seq]] = seq
    assert found == last, "the image mixes writes from before and after one instant"
    return cut


def test_live_backups_hold_the_checkpoint_s_content_never_a_mix(engine, running_vm):
    daemon, url, volume = running_vm
    writer = Writer(url)
    for _ in range(600):  # most blocks written before the first checkpoint
        writer.write_one()
    with writer:
        wait_for(writer, 700)
        first = engine.backup(
            disks={"d": volume}, qmp=daemon.qmp_socket, nbd_socket=daemon.nbd_socket
        ).disks[0]
        at_first = len(writer.log)
        second = engine.backup(
            disks={"d": volume}, qmp=daemon.qmp_socket, nbd_socket=daemon.nbd_socket
        ).disks[0]
        at_second = len(writer.log)
        wait_for(writer, at_second + 200)
    assert (first.type, second.type) == ("full", "incremental")
    cuts = []
    for point in (first, second):
        out = Path(engine.root) / f"{point.snapshot}.raw"
        engine.restore(point.snapshot, out)
        cuts.append(assert_one_instant(out.read_bytes(), writer.log))
    assert 600 <= cuts[0] <= at_first <= cuts[1] <= at_second < len(writer.log) - 1
    changed = set(writer.log[cuts[0] + 1 : cuts[1] + 1])
    assert second.bytes_read == len(changed) * BLOCK  # exactly the blocks written in between
