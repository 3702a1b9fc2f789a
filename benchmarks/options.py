"""The options every benchmark command takes: where it works, its rounds, which of its parts
to run and a smaller disk; and what they set before a run."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from pathlib import Path

from benchmarks.data import DATA_ENV, VIRTUAL_ENV


def parser_for(description: str | None, names: Iterable[str]) -> argparse.ArgumentParser:
    """A parser with the common options; `--only` chooses among `names`, all by default."""
    names = list(names)
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--workdir", type=Path, default=Path("benchmarks/work"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--only", default=",".join(names), help=f"comma-separated, of {', '.join(names)}"
    )
    parser.add_argument("--virtual-mib", type=int, help="a smaller disk's virtual size, MiB")
    parser.add_argument("--data-mib", type=int, help="a smaller disk's data, MiB")
    return parser


def as_installed() -> None:
    """Have the processes started from now on cache diskferry's bytecode, as an installed
    wheel has it, so that no worker compiles the sources at its start."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def chosen(
    parser: argparse.ArgumentParser, args: argparse.Namespace, names: Iterable[str]
) -> list[str]:
    """The names `--only` chose (an unknown one is a usage error), once the disk's sizes are
    set in the environment and diskferry's bytecode is cached as an installed package's is."""
    names = list(names)
    as_installed()
    if args.virtual_mib:
        os.environ[VIRTUAL_ENV] = str(args.virtual_mib)
    if args.data_mib:
        os.environ[DATA_ENV] = str(args.data_mib)
    picked = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in picked if name not in names]
    if unknown:
        parser.error(f"unknown {', '.join(unknown)}: choose of {', '.join(names)}")
    return picked
