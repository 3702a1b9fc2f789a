"""`make bench`: run the benchmarks and print a table of medians and ratios for each."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from benchmarks.data import DATA_ENV, VIRTUAL_ENV
from benchmarks.measure import Comparison

Bench = Callable[[Path, int], list[tuple[Comparison, str]]]


def _benchmarks() -> dict[str, Bench]:
    from benchmarks import (
        bench_backup,
        bench_control,
        bench_export,
        bench_growth,
        bench_import,
        bench_transfer,
    )

    return {
        "import": bench_import.run,
        "export": bench_export.run,
        "backup": bench_backup.run,
        "control": bench_control.run,
        "transfer": bench_transfer.run,
        "growth": bench_growth.run,
    }


def print_table(title: str, rows: list[tuple[Comparison, str]]) -> None:
    """One benchmark's rows as a Markdown table."""
    print(f"\n### {title}\n")
    print("| job | diskferry (median s) | peer (median s) | ratio | diskferry peak RSS | note |")
    print("|---|---|---|---|---|---|")
    for cmp, extra in rows:
        name, note = (text.replace("|", "\\|") for text in (cmp.name, extra))
        print(
            f"| {name} | {cmp.ours_median:.2f} | {cmp.peer_median:.2f} | {cmp.ratio:.2f} "
            f"| {cmp.peak_rss / 2**20:.0f} MiB | {note} |",
            flush=True,
        )


def main() -> None:
    """Run the chosen benchmarks and print their tables."""
    benchmarks = _benchmarks()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("benchmarks/work"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only",
        default=",".join(benchmarks),
        help=f"comma-separated benchmarks to run, of {', '.join(benchmarks)}",
    )
    parser.add_argument("--virtual-mib", type=int, help="a smaller disk's virtual size, MiB")
    parser.add_argument("--data-mib", type=int, help="a smaller disk's data, MiB")
    args = parser.parse_args()
    # diskferry is timed as installed, its modules' bytecode cached after the first run
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if args.virtual_mib:
        os.environ[VIRTUAL_ENV] = str(args.virtual_mib)
    if args.data_mib:
        os.environ[DATA_ENV] = str(args.data_mib)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in benchmarks]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}: choose of {', '.join(benchmarks)}")
    for name in chosen:
        # a benchmark that returns no rows printed its own tables
        if rows := benchmarks[name](args.workdir, args.rounds):
            print_table(name, rows)


if __name__ == "__main__":
    main()
