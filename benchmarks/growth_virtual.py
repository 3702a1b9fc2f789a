"""How a full backup and an import grow with the virtual size at constant data: the disk
and one eight times its size, both with the same bytes of data; diskferry's time stays flat.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
from collections.abc import Iterator
from pathlib import Path

from benchmarks.bench_backup import (
    Tool,
    workspace,
)
from benchmarks.bench_import import Imports
from benchmarks.data import DATA_ENV, VIRTUAL_ENV, make_disk, sizes
from benchmarks.measure import Run
from benchmarks.plot import Panel, Plot, Series
from benchmarks.table import Table, mib, size

FACTOR = 8


@contextlib.contextmanager
def disk_sizes(virtual: int, data: int) -> Iterator[None]:
    """The benchmark disk is `virtual` bytes with `data` of data while the block runs."""
    saved = {name: os.environ.get(name) for name in (VIRTUAL_ENV, DATA_ENV)}
    os.environ[VIRTUAL_ENV], os.environ[DATA_ENV] = str(virtual >> 20), str(data >> 20)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _one_size(workdir: Path, rounds: int) -> dict[str, list[Run]]:
    """Full backups by each tool and imports of the qcow2, on the disk of the present size."""
    disk = make_disk((workdir / "data").resolve(), ("qcow2",))
    space = workspace(disk["raw"], (workdir / "growth-virtual").resolve(), borg_defaults=False)
    root = space.root
    tools: list[Tool] = [space.ours, *space.peers]
    runs: dict[str, list[Run]] = {f"full backup: {t.name}": [] for t in tools}
    for _ in range(rounds):
        for tool in tools:
            shutil.rmtree(tool.repo, ignore_errors=True)
            tool.init()
            runs[f"full backup: {tool.name}"].append(tool.backup(0))
    for tool in tools:
        shutil.rmtree(tool.repo, ignore_errors=True)
    out = root / "out"
    out.mkdir()
    qcow2 = disk["qcow2"]
    peer = f"qemu-img convert -O raw {qcow2} {{out}}"
    [(cmp, _)] = Imports(out, rounds).rows("qcow2", str(qcow2), {"qemu-img convert": peer}, 1.1)
    runs["import qcow2 -> raw: diskferry"] = cmp.ours
    runs["import qcow2 -> raw: qemu-img convert + sync"] = cmp.peer
    shutil.rmtree(root)
    return runs


def measure(workdir: Path, rounds: int) -> tuple[Table, Plot]:
    """Each job's median time on the disk and on one FACTOR times as large, same data."""
    virtual, data = sizes()
    virtuals = [virtual, virtual * FACTOR]
    by_size = []
    for v in virtuals:
        with disk_sizes(v, data):
            by_size.append(_one_size(workdir, rounds))
    table = Table(
        "growth: full backup and import against the virtual size",
        [
            "job",
            *(f"{size(v)} virtual (median s)" for v in virtuals),
            f"{size(virtuals[1])} over {size(virtuals[0])}",
            *(f"peak RSS at {size(v)}" for v in virtuals),
        ],
    )
    backup = Panel("full backup time (s)")
    imports = Panel("import time (s)")
    for job in by_size[0]:
        medians = [statistics.median(r.seconds for r in runs[job]) for runs in by_size]
        peaks = [mib(max(r.peak_rss for r in runs[job])) for runs in by_size]
        ours = job.endswith(": diskferry")
        table.rows.append(
            [
                job,
                *(f"{m:.2f}" for m in medians),
                f"{medians[1] / medians[0]:.2f}",
                *(peaks if ours else ["-"] * len(peaks)),
            ]
        )
        panel = backup if job.startswith("full backup") else imports
        label = job.partition(": ")[2]
        panel.series.append(
            Series.of(label, [(v / 2**30, m) for v, m in zip(virtuals, medians, strict=True)])
        )
    table.notes.append(
        f"Medians of {rounds} round(s); {size(data)} of data in 1,024 runs spread over each disk; "
        "peak RSS of the diskferry process (with its children)."
    )
    plot = Plot(
        f"Full backup and import against the virtual size, {size(data)} of data",
        "virtual size (GiB)",
        [backup, imports],
    )
    return table, plot
