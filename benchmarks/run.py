"""`make bench`: run every benchmark and print a table of medians and ratios."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import bench_import


def main() -> None:
    """Run the benchmarks and print their table."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workdir", type=Path, default=Path("benchmarks/work"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = bench_import.run(args.workdir, args.rounds)
    print("| job | diskferry (median s) | peer (median s) | ratio | diskferry peak RSS | note |")
    print("|---|---|---|---|---|---|")
    for cmp, extra in rows:
        print(
            f"| {cmp.name} | {cmp.ours_median:.2f} | {cmp.peer_median:.2f} | {cmp.ratio:.2f} "
            f"| {cmp.peak_rss / 2**20:.0f} MiB | {extra} |"
        )


if __name__ == "__main__":
    main()
