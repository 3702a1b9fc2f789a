"""`make bench`: run the benchmarks and print a table of medians and ratios for each."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.load import LoadWatch
from benchmarks.measure import Comparison
from benchmarks.options import chosen, parser_for

Bench = Callable[[Path, int], list[tuple[Comparison, str]]]


def _benchmarks() -> dict[str, Bench]:
    from benchmarks import (
        bench_backup,
        bench_control,
        bench_export,
        bench_growth,
        bench_import,
        bench_operator,
        bench_transfer,
    )

    return {
        "import": bench_import.run,
        "export": bench_export.run,
        "backup": bench_backup.run,
        "control": bench_control.run,
        "operator": bench_operator.run,
        "transfer": bench_transfer.run,
        "growth": bench_growth.run,
    }


def print_table(title: str, rows: list[tuple[Comparison, str]], load: LoadWatch) -> None:
    """One benchmark's rows as a Markdown table, and the load average during its run."""
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
    print(f"\n{load.summary()}", flush=True)


def main() -> None:
    """Run the chosen benchmarks and print their tables."""
    benchmarks = _benchmarks()
    parser = parser_for(__doc__, benchmarks)
    args = parser.parse_args()
    for name in chosen(parser, args, benchmarks):
        # a benchmark that returns no rows printed its own tables
        with LoadWatch() as load:
            rows = benchmarks[name](args.workdir, args.rounds)
        if rows:
            print_table(name, rows, load)


if __name__ == "__main__":
    main()
