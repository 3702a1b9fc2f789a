"""Import benchmarks: start-up and qcow2 to raw against qemu-img, gzip over HTTP against curl |
gunzip."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.data import make_disk, sizes
from benchmarks.measure import Comparison, alternate, run_process
from benchmarks.nginx import nginx

DISKFERRY = [sys.executable, "-m", "diskferry.cli.main"]


def _drop(path: Path) -> None:
    path.unlink(missing_ok=True)


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def startup(rounds: int) -> Comparison:
    """`diskferry --version` against `qemu-img --version`: what starting the tool costs."""
    return alternate(
        "start-up: diskferry --version",
        lambda: run_process([*DISKFERRY, "--version"], stdout=subprocess.DEVNULL),
        lambda: run_process(["qemu-img", "--version"], stdout=subprocess.DEVNULL),
        rounds,
    )


def run(workdir: Path, rounds: int) -> list[tuple[Comparison, str]]:
    """Start-up and both import comparisons, with a note on output sparseness."""
    rows = [(startup(rounds), "interpreter and CLI start-up; part of every diskferry row")]
    disk = make_disk((workdir / "data").resolve())
    out = workdir / "out"
    out.mkdir(exist_ok=True)
    ours_out, peer_out = out / "ours.raw", out / "peer.raw"

    def clean() -> None:
        _drop(ours_out)
        _drop(peer_out)
        subprocess.run(["sync"], check=True)

    convert = alternate(
        "import qcow2 -> raw (local)",
        lambda: run_process(
            [*DISKFERRY, "import", str(disk["qcow2"]), str(ours_out), "--no-progress"]
        ),
        lambda: run_process(
            f"qemu-img convert -O raw {disk['qcow2']} {peer_out} && sync {peer_out}"
        ),
        rounds,
        clean,
    )
    rows.append((convert, "goal: time ratio <= 1.1"))

    with nginx(disk["gzip"].parent) as base:
        url = f"{base}/{disk['gzip'].name}"
        gz = alternate(
            "import gzip raw over HTTP",
            lambda: run_process([*DISKFERRY, "import", url, str(ours_out), "--no-progress"]),
            lambda: run_process(f"curl -s {url} | gunzip > {peer_out}"),
            rounds,
            clean,
        )
        run_process([*DISKFERRY, "import", url, str(ours_out), "--no-progress"])
        sparse = _allocated(ours_out) / sizes()[1]
        rows.append((gz, f"goal: time ratio <= 1.0; output allocated = {sparse:.3f} x data"))
    shutil.rmtree(out)
    return rows
