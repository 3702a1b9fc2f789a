"""docs/troubleshooting.md explains every reason a typed error of diskferry's and a job the
daemon runs can name, so that a failure a user meets is on that page."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import diskferry
from diskferry.base import DiskferryError
from diskferry.control.runner.jobs import BAD_RESULT, CANCELLED, JOB_FAILED, WORKER_LOST

PAGE = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
FIRST_CELL = re.compile(r"^\| ((?:`\w+`(?:, )?)+) \|", re.MULTILINE)


def _subclasses(cls: type) -> set[type]:
    """Every class below `cls`."""
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def named_reasons() -> dict[str, str]:
    """Each reason a DiskferryError subclass declares, or a job of the runner ends with, and
    where it is declared."""
    for module in pkgutil.walk_packages(diskferry.__path__, "diskferry."):
        importlib.import_module(module.name)
    reasons = {
        reason: "diskferry.control.runner.jobs"
        for reason in (BAD_RESULT, CANCELLED, JOB_FAILED, WORKER_LOST)
    }
    for cls in _subclasses(DiskferryError):
        reason = cls.__dict__.get("reason")
        if isinstance(reason, str):
            reasons.setdefault(reason, f"{cls.__module__}.{cls.__qualname__}")
    return reasons


def explained(text: str) -> set[str]:
    """The reasons the page's tables explain: those named in a row's first cell."""
    return {name for cell in FIRST_CELL.findall(text) for name in re.findall(r"`(\w+)`", cell)}


def test_every_reason_diskferry_names_is_explained() -> None:
    reasons = named_reasons()
    assert len(reasons) > 50
    missing = sorted(set(reasons) - explained(PAGE.read_text()))
    where = ", ".join(f"{reason} ({reasons[reason]})" for reason in missing)
    assert not missing, (
        f"docs/troubleshooting.md does not explain {where}: add a row saying what each "
        "means and what to change"
    )
