"""The benchmark disk: 8 GiB virtual with 2 GiB of data in scattered runs, made once, and
its images in other formats and compressions, each made once when first asked for.

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


# each image: its file name and the command that makes it from the raw disk (given last)
_CONVERTED = {
    "qcow2": ("disk.qcow2", ["qemu-img", "convert", "-O", "qcow2"]),
    "vmdk": ("disk.vmdk", ["qemu-img", "convert", "-O", "vmdk"]),
    "vhdx": ("disk.vhdx", ["qemu-img", "convert", "-O", "vhdx"]),
}
# each compression at its tool's default level but gzip's (-1, fast): to stdout
_COMPRESSED = {
    "gzip": ("disk.raw.gz", ["pigz", "-c", "-1"]),
    "zstd": ("disk.raw.zst", ["zstd", "-q", "-c", "-T0"]),
    "xz": ("disk.raw.xz", ["xz", "-c", "-T0"]),
}
IMAGES = (*_CONVERTED, *_COMPRESSED)


def _make_image(raw: Path, kind: str) -> Path:
    """The image `kind` of the raw disk beside it, made if it is not there yet."""
    name, command = _CONVERTED.get(kind) or _COMPRESSED[kind]
    path = raw.with_name(name)
    if path.exists():
        return path
    tmp = path.with_name(f"{name}.tmp")
    if kind in _CONVERTED:
        subprocess.run([*command, str(raw), str(tmp)], check=True)
    else:
        with open(tmp, "wb") as out:
            subprocess.run([*command, str(raw)], stdout=out, check=True)
    os.replace(tmp, path)
    return path


def make_disk(workdir: Path, kinds: tuple[str, ...] = ("qcow2", "gzip")) -> dict[str, Path]:
    """Make (once) the raw disk and its images of `kinds` (of IMAGES) in `workdir`; return
    their paths by kind ("raw" for the disk)."""
    virtual, data = sizes()
    if (virtual, data) != (VIRTUAL, DATA):
        workdir = workdir / f"{virtual >> 20}M-{data >> 20}M"
    workdir.mkdir(parents=True, exist_ok=True)
    raw = workdir / "disk.raw"
    if not raw.exists():
        rng = random.Random(_SEED)
        tmp = raw.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.truncate(virtual)
            for start, length in _runs(rng):
                f.seek(start)
                f.write(fill(rng, length))
        os.replace(tmp, raw)
    return {"raw": raw} | {kind: _make_image(raw, kind) for kind in kinds}
