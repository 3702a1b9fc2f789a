"""Import benchmarks: start-up, then images local and over HTTP into a raw file, each against
its best peer (qemu-img, or a decompressor writing a sparse file), every output flushed to disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.data import IMAGES, make_disk, sizes
from benchmarks.measure import Comparison, Run, alternate, alternate_peers, ranked, run_process
from benchmarks.nginx import nginx

DISKFERRY = [sys.executable, "-m", "diskferry.cli.main"]
# what a peer's output goes through to be written sparse, as diskferry writes it
_SPARSE_DD = "dd of={out} conv=sparse bs=1M status=none"


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


class Imports:
    """`diskferry import SOURCE out` against peers' shell commands writing `{out}` and then
    synced, alternating; each output's allocated bytes kept from its last run."""

    def __init__(self, out: Path, rounds: int) -> None:
        self.ours_out, self.peer_out = out / "ours.raw", out / "peer.raw"
        self.rounds = rounds
        self.allocated: dict[str, float] = {}

    def _clean(self) -> None:
        _drop(self.ours_out)
        _drop(self.peer_out)
        subprocess.run(["sync"], check=True)

    def _ours(self, source: str) -> Callable[[], Run]:
        def once() -> Run:
            run = run_process([*DISKFERRY, "import", source, str(self.ours_out), "--no-progress"])
            self.allocated["diskferry"] = _allocated(self.ours_out) / sizes()[1]
            return run

        return once

    def _peer(self, name: str, command: str) -> Callable[[], Run]:
        out = self.peer_out

        def once() -> Run:
            run = run_process(f"{command.format(out=out)} && sync {out}")
            self.allocated[name] = _allocated(out) / sizes()[1]
            return run

        return once

    def rows(
        self, job: str, source: str, peers: dict[str, str], goal: float
    ) -> list[tuple[Comparison, str]]:
        """`job` from `source` against `peers` (name: command), the best first with `goal`."""
        cmps = alternate_peers(
            f"import {job}",
            self._ours(source),
            {name: self._peer(name, command) for name, command in peers.items()},
            self.rounds,
            self._clean,
        )

        def note(best: Comparison) -> str:
            peer = best.name.rpartition(" vs ")[2]
            return (
                f"goal: time ratio <= {goal}; output allocated = "
                f"{self.allocated['diskferry']:.3f} x data (peer's {self.allocated[peer]:.3f})"
            )

        return ranked(cmps, note)


def run(workdir: Path, rounds: int) -> list[tuple[Comparison, str]]:
    """Start-up and the import comparisons, with a note on each output's sparseness."""
    rows = [(startup(rounds), "interpreter and CLI start-up; part of every diskferry row")]
    disk = make_disk((workdir / "data").resolve(), IMAGES)
    out = workdir / "out"
    out.mkdir(exist_ok=True)
    imports = Imports(out, rounds)
    for kind in ("qcow2", "vmdk", "vhdx"):
        rows += imports.rows(
            f"{kind} -> raw (local)",
            str(disk[kind]),
            {"qemu-img convert": f"qemu-img convert -O raw {disk[kind]} {{out}}"},
            1.1,
        )
    rows += imports.rows(
        "zstd raw (local) -> sparse raw",
        str(disk["zstd"]),
        {"zstd -d --sparse": f"zstd -q -f -d --sparse {disk['zstd']} -o {{out}}"},
        1.2,
    )
    rows += imports.rows(
        "xz raw (local) -> sparse raw",
        str(disk["xz"]),
        {"xz -T0 -d | dd conv=sparse": f"xz -T0 -d -c {disk['xz']} | {_SPARSE_DD}"},
        1.0,
    )
    with nginx(disk["raw"].parent) as base:
        raw_url = f"{base}/{disk['raw'].name}"
        rows += imports.rows(
            "raw over HTTP -> sparse raw",
            raw_url,
            {"qemu-img convert -m 1": f"qemu-img convert -m 1 -O raw {raw_url} {{out}}"},
            0.5,
        )
        gz_url = f"{base}/{disk['gzip'].name}"
        rows += imports.rows(
            "gzip raw over HTTP -> sparse raw",
            gz_url,
            {
                "curl | pigz -d | dd conv=sparse": f"curl -s {gz_url} | pigz -d | {_SPARSE_DD}",
                "curl | gunzip": f"curl -s {gz_url} | gunzip > {{out}}",
            },
            1.0,
        )
    shutil.rmtree(out)
    return rows
