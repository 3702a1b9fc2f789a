"""How an incremental backup grows with the changed fraction of the disk: diskferry's time
and upload should follow the changed bytes, restic's and borg's the disk they re-read.

Each round gives every tool a fresh repository and a full backup, then for each fraction
in turn writes that share of the virtual size at scattered places inside the data (through
the CBT overlay, so into the raw file the peers read) and runs every tool's incremental.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

from benchmarks.bench_backup import (
    WRITE_SIZE,
    Tool,
    apply_change,
    make_change,
    tree_size,
    workspace,
)
from benchmarks.data import data_runs, make_disk, sizes
from benchmarks.plot import Panel, Plot, Series
from benchmarks.table import Table, mib


def _write_size() -> int:
    """64 KiB writes, or the length of a data run where a small disk's runs are shorter."""
    return min(WRITE_SIZE, min(length for _, length in data_runs()))


def measure(workdir: Path, rounds: int, percents: list[float]) -> tuple[Table, Plot]:
    """Incremental time and repository growth for each changed share of the virtual size."""
    source = make_disk((workdir / "data").resolve())["raw"]
    space = workspace(source, (workdir / "growth-incremental").resolve(), borg_defaults=False)
    root, disk, ours = space.root, space.disk, space.ours
    tools: list[Tool] = [ours, *space.peers]
    virtual = sizes()[0]
    size = _write_size()
    writes = {p: max(1, round(virtual * p / 100 / size)) for p in percents}
    seconds = {p: {t.name: [] for t in tools} for p in percents}
    uploaded = {p: {t.name: [] for t in tools} for p in percents}
    peaks: list[int] = []
    compressed: dict[float, list[int]] = {p: [] for p in percents}
    for r in range(rounds):
        for tool in tools:
            shutil.rmtree(tool.repo, ignore_errors=True)
            tool.init()
            tool.backup(0)
        for point, percent in enumerate(percents, 1):
            change = make_change(root / "writes", 1000 * r + point, writes[percent], size)
            apply_change(change, Path(f"{disk}.cbt.qcow2"))
            compressed[percent].append(change.compressed)
            for tool in tools:
                before = tree_size(tool.repo)
                run = tool.backup(point)
                seconds[percent][tool.name].append(run.seconds)
                uploaded[percent][tool.name].append(tree_size(tool.repo) - before)
                if tool is ours:
                    peaks.append(run.peak_rss)
        kinds = [result["type"] for result in ours.results]
        if kinds != ["full"] + ["incremental"] * len(percents):
            raise RuntimeError(f"diskferry did not back up full, then incremental: {kinds}")
    for tool in tools:
        shutil.rmtree(tool.repo, ignore_errors=True)
    shutil.rmtree(root)

    names = [t.name for t in tools]
    table = Table(
        "growth: incremental backup against the changed fraction",
        [
            "changed (of the virtual size)",
            "writes",
            "changed bytes (zstd)",
            *(f"{name} (median s)" for name in names),
            *(f"{name} uploaded" for name in names),
            "diskferry uploaded / changed (zstd)",
        ],
    )
    time_panel = Panel("incremental backup time (s)", logy=True)
    bytes_panel = Panel("repository growth (MiB)", logy=True)
    for percent in percents:
        changed = statistics.median(compressed[percent])
        times = [statistics.median(seconds[percent][name]) for name in names]
        grown = [statistics.median(uploaded[percent][name]) for name in names]
        table.rows.append(
            [
                f"{percent:g} %",
                f"{writes[percent]:,} of {size >> 10} KiB",
                mib(changed),
                *(f"{t:.2f}" for t in times),
                *(mib(g) for g in grown),
                f"{grown[0] / changed:.2f}",
            ]
        )
    for name in names:
        time_panel.series.append(
            Series.of(name, [(p, statistics.median(seconds[p][name])) for p in percents])
        )
        bytes_panel.series.append(
            Series.of(name, [(p, statistics.median(uploaded[p][name]) / 2**20) for p in percents])
        )
    bytes_panel.series.append(
        Series.of(
            "changed bytes, zstd",
            [(p, statistics.median(compressed[p]) / 2**20) for p in percents],
            dashed=True,
        )
    )
    table.notes.append(
        f"Medians of {rounds} round(s) on a {virtual >> 20} MiB virtual disk with "
        f"{sizes()[1] >> 20} MiB of data; uploaded is the growth of each repository's files "
        f"over the incremental; diskferry's peak RSS {mib(max(peaks))}."
    )
    plot = Plot(
        "Incremental backup against the changed fraction of the disk",
        "changed (% of the virtual size)",
        [time_panel, bytes_panel],
        logx=True,
    )
    return table, plot
