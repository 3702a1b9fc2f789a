"""Backup benchmarks: diskferry with changed-block tracking against restic and borg."""

from __future__ import annotations

from pathlib import Path

from benchmarks.measure import Comparison


def run(workdir: Path, rounds: int) -> list[tuple[Comparison, str]]:
    """Every backup comparison."""
    return []
