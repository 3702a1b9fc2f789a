"""How cost grows with the work: each part as a Markdown table and a PNG plot beside the
README (`growth_<part>.png`), with the load average during its run.

`make bench` runs every part at its full sizes; `python -m benchmarks.bench_growth` runs
one part or smaller sizes, e.g. `--only index --index-chunks 1000,10000`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks import growth_export, growth_incremental, growth_index, growth_virtual
from benchmarks.load import LoadWatch
from benchmarks.measure import Comparison
from benchmarks.options import chosen, parser_for
from benchmarks.plot import Plot, save_plot
from benchmarks.table import Table

PLOTS = Path(__file__).parent
PERCENTS = [0.1, 1.0, 10.0]
INDEX_CHUNKS = [10**5, 10**6, 10**7]
INDEX_LOOKUPS = 100_000
# a dict of the whole index needs about 330 MB at 10^6 chunks: the peer stops there
DICT_MAX = 10**6
CLIENTS = growth_export.CLIENTS
EXPORT_TOTAL_MIB = growth_export.TOTAL >> 20

Part = Callable[[Path, int], tuple[Table, Plot]]


def parts(
    percents: list[float] = PERCENTS,
    index_chunks: list[int] = INDEX_CHUNKS,
    lookups: int = INDEX_LOOKUPS,
    dict_max: int = DICT_MAX,
    clients: list[int] = CLIENTS,
    export_total_mib: int = EXPORT_TOTAL_MIB,
) -> dict[str, Part]:
    """Each part by name, measuring at the sizes given."""
    return {
        "incremental": lambda w, r: growth_incremental.measure(w, r, percents),
        "virtual": growth_virtual.measure,
        "index": lambda w, r: growth_index.measure(w, r, index_chunks, lookups, dict_max),
        "export": lambda w, r: growth_export.measure(w, r, clients, export_total_mib << 20),
    }


def run_parts(chosen: dict[str, Part], workdir: Path, rounds: int, plots: Path) -> None:
    """Run each part, print its table with the load average, save its plot."""
    for name, part in chosen.items():
        with LoadWatch() as load:
            table, plot = part(workdir, rounds)
        table.notes.append(load.summary())
        path = plots / f"growth_{name}.png"
        save_plot(plot, path)
        table.notes.append(f"Plot: [{path.name}]({path.name}).")
        print("\n" + table.markdown() + "\n", flush=True)


def run(workdir: Path, rounds: int) -> list[tuple[Comparison, str]]:
    """Every part at full size, for `make bench`; its tables print as they finish."""
    run_parts(parts(), workdir, rounds, PLOTS)
    return []


def _numbers(kind: Callable[[str], float | int]) -> Callable[[str], list]:
    return lambda text: [kind(item) for item in text.split(",") if item.strip()]


def main() -> None:
    """Run the parts chosen, at the sizes given."""
    parser = parser_for(__doc__, parts())
    parser.add_argument("--changed-percent", type=_numbers(float), default=PERCENTS)
    parser.add_argument("--index-chunks", type=_numbers(int), default=INDEX_CHUNKS)
    parser.add_argument("--index-lookups", type=int, default=INDEX_LOOKUPS)
    parser.add_argument("--dict-max", type=int, default=DICT_MAX)
    parser.add_argument("--export-clients", type=_numbers(int), default=CLIENTS)
    parser.add_argument(
        "--export-total-mib",
        type=int,
        default=EXPORT_TOTAL_MIB,
        help="the least each client count downloads in all, MiB",
    )
    parser.add_argument("--plots", type=Path, default=PLOTS, help="where the PNGs go")
    args = parser.parse_args()
    every = parts(
        args.changed_percent,
        args.index_chunks,
        args.index_lookups,
        args.dict_max,
        args.export_clients,
        args.export_total_mib,
    )
    run_parts(
        {n: every[n] for n in chosen(parser, args, every)}, args.workdir, args.rounds, args.plots
    )


if __name__ == "__main__":
    main()
