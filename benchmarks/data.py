"""The benchmark disk: 8 GiB virtual with 2 GiB of data in scattered runs, made once.

`DISKFERRY_BENCH_VIRTUAL_MIB` and `DISKFERRY_BENCH_DATA_MIB` (set by `run.py --virtual-mib
--data-mib`) make a smaller one, kept apart, to check that the benchmarks work.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

VIRTUAL = 8 << 30
DATA = 2 << 30
_SEED = 20261129
VIRTUAL_ENV = "DISKFERRY_BENCH_VIRTUAL_MIB"
DATA_ENV = "DISKFERRY_BENCH_DATA_MIB"


def sizes() -> tuple[int, int]:
    """The disk's virtual size and its bytes of data: the defaults, or as the environment says."""
    virtual = int(os.environ.get(VIRTUAL_ENV, VIRTUAL >> 20)) << 20
    data = int(os.environ.get(DATA_ENV, DATA >> 20)) << 20
    return virtual, data


def _runs(rng: random.Random) -> list[tuple[int, int]]:
    """Non-overlapping (offset, length) runs, 64 KiB-aligned, adding up to the data bytes."""
    virtual, data = sizes()
    runs = []
    slot = virtual // 1024
    per_slot = data // 1024
    for i in range(1024):
        length = per_slot
        start = i * slot + rng.randrange(0, (slot - length) // 65536) * 65536
        runs.append((start, length))
    return runs


def fill(rng: random.Random, length: int) -> bytes:
    """Half random bytes, half text-like repetition: compresses about 2:1, like a real disk."""
    half = length // 2
    words = b"diskferry moves virtual machine disks between hosts and clusters "
    text = (words * (half // len(words) + 1))[:half]
    return rng.randbytes(length - half) + text


def data_runs() -> list[tuple[int, int]]:
    """The (offset, length) runs that hold the benchmark disk's data."""
    return _runs(random.Random(_SEED))


def make_disk(workdir: Path) -> dict[str, Path]:
    """Make (once) the raw disk, its qcow2 and its gzip in `workdir`; return their paths."""
    virtual, data = sizes()
    if (virtual, data) != (VIRTUAL, DATA):
        workdir = workdir / f"{virtual >> 20}M-{data >> 20}M"
    workdir.mkdir(parents=True, exist_ok=True)
    raw = workdir / "disk.raw"
    qcow2 = workdir / "disk.qcow2"
    gz = workdir / "disk.raw.gz"
    if not raw.exists():
        rng = random.Random(_SEED)
        tmp = raw.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.truncate(virtual)
            for start, length in _runs(rng):
                f.seek(start)
                f.write(fill(rng, length))
        os.replace(tmp, raw)
    if not qcow2.exists():
        subprocess.run(["qemu-img", "convert", "-O", "qcow2", str(raw), f"{qcow2}.tmp"], check=True)
        os.replace(f"{qcow2}.tmp", qcow2)
    if not gz.exists():
        with open(f"{gz}.tmp", "wb") as out:
            subprocess.run(["pigz", "-c", "-1", str(raw)], stdout=out, check=True)
        os.replace(f"{gz}.tmp", gz)
    return {"raw": raw, "qcow2": qcow2, "gzip": gz}
