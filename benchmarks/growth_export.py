"""How export throughput grows with the clients: 1 to 200 concurrent downloads of one volume
from the export server, through the proxy, and from nginx direct, with each server's peak RSS.

Every client count moves at least the same total of bytes (more when there are more clients
than that total has downloads), so that each point is a run long enough to time. Each count
starts fresh servers, so that each peak RSS is that count's.
"""

from __future__ import annotations

import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.bench_export import (
    LOAD_VOLUME,
    PROXY_PREFIX,
    Setup,
    parallel_downloads,
    prepare,
    served,
)
from benchmarks.measure import Run, alternate_peers, server_peak_rss
from benchmarks.nginx import nginx
from benchmarks.plot import Panel, Plot, Series
from benchmarks.table import Table, mib

CLIENTS = [1, 4, 20, 200]
TOTAL = 4 << 30
_NAMES = ("export server", "proxy", "nginx direct")


@dataclass
class Point:
    """One server at one client count: median MiB/s and peak RSS in bytes."""

    speed: float
    peak_rss: int


def _downloads(clients: int, total: int) -> int:
    """How many downloads of the volume a run of `clients` makes."""
    return max(clients, total // LOAD_VOLUME)


def _one_count(s: Setup, web: str, count: int, total: int, rounds: int) -> list[Point]:
    """Each server's median throughput and peak RSS (0 for nginx) with `count` clients."""
    downloads = _downloads(count, total)

    def fetch(name: str, base: str, path: str) -> Callable[[], Run]:
        urls, codes = s.root / f"{name}.curl", s.root / "codes"
        return parallel_downloads(urls, codes, base, path, s.ca, downloads, count)

    with s.export(s.small) as exp, s.proxied(s.small) as (_, proxy):
        direct = fetch("export", exp.url + "/volumes/disk", "disk.img")
        proxied = fetch("proxy", proxy.url + PROXY_PREFIX + "/volumes/disk", "disk.img")
        [via_proxy, via_nginx] = alternate_peers(
            f"{count} clients",
            lambda: served(direct(), exp.proc.pid),
            {
                "proxy": lambda: served(proxied(), proxy.proc.pid),
                "nginx": fetch("nginx", web, s.small.name),
            },
            rounds,
        )
        peaks = [server_peak_rss(exp.proc.pid), server_peak_rss(proxy.proc.pid), 0]
    moved = downloads * LOAD_VOLUME / 2**20
    runs = (via_proxy.ours, via_proxy.peer, via_nginx.peer)
    return [
        Point(moved / statistics.median(r.seconds for r in server), peak)
        for server, peak in zip(runs, peaks, strict=True)
    ]


def measure(
    workdir: Path, rounds: int, clients: list[int] = CLIENTS, total: int = TOTAL
) -> tuple[Table, Plot]:
    """Median throughput of each server at each client count, and the diskferry servers' peaks."""
    s = prepare(workdir)
    with nginx(s.root, s.root / "nginx.crt", s.root / "nginx.key") as web:
        points = [_one_count(s, web, count, total, rounds) for count in clients]
    shutil.rmtree(s.root)
    speeds = {name: [p[i].speed for p in points] for i, name in enumerate(_NAMES)}
    peaks = {name: [p[i].peak_rss for p in points] for i, name in enumerate(_NAMES[:2])}
    table = Table(
        "growth: export throughput against concurrent clients",
        [
            "clients",
            "downloads",
            *(f"{name} (MiB/s)" for name in _NAMES),
            "export / nginx",
            "proxy / nginx",
            "export server peak RSS",
            "proxy peak RSS",
        ],
    )
    for i, count in enumerate(clients):
        nginx_speed = speeds["nginx direct"][i]
        table.rows.append(
            [
                str(count),
                str(_downloads(count, total)),
                *(f"{speeds[name][i]:.0f}" for name in _NAMES),
                f"{speeds['export server'][i] / nginx_speed:.2f}",
                f"{speeds['proxy'][i] / nginx_speed:.2f}",
                mib(peaks["export server"][i]),
                mib(peaks["proxy"][i]),
            ]
        )
    table.notes.append(
        f"Throughput is the bytes of all downloads ({mib(LOAD_VOLUME)} each) over the median "
        f"wall time of {rounds} round(s) of `curl --parallel`, the servers alternating; peak "
        "RSS is VmHWM of each diskferry server over all its rounds at that count."
    )
    plot = Plot(
        "Export throughput and memory against concurrent clients",
        "concurrent clients",
        [
            Panel(
                "throughput (MiB/s)",
                [Series.of(n, list(zip(clients, speeds[n], strict=True))) for n in _NAMES],
            ),
            Panel(
                "peak RSS (MiB)",
                [
                    Series.of(n, [(c, p / 2**20) for c, p in zip(clients, peaks[n], strict=True)])
                    for n in peaks
                ],
            ),
        ],
        logx=True,
    )
    return table, plot
