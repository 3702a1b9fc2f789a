"""docs/troubleshooting.md explains every reason a typed error of diskferry's and a job the
daemon runs can name, and every reason a controller writes with a Failed phase or a False Ready
condition (each a `Reason` constant), so that a failure a user meets is on that page."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import diskferry
from diskferry.base import DiskferryError
from diskferry.control.resources.model import Reason
from diskferry.control.runtime.runner.jobs import BAD_RESULT, CANCELLED, JOB_FAILED, WORKER_LOST

PAGE = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
FIRST_CELL = re.compile(r"^\| ((?:`\w+`(?:, )?)+) \|", re.MULTILINE)


def _subclasses(cls: type) -> set[type]:
    """Every class below `cls`."""
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def every_module() -> list[ModuleType]:
    """Every module of diskferry, imported."""
    return [
        importlib.import_module(module.name)
        for module in pkgutil.walk_packages(diskferry.__path__, "diskferry.")
    ]


def controller_reasons(modules: list[ModuleType]) -> dict[str, str]:
    """Each `Reason` constant of `modules` (what a controller writes with a Failed phase or a
    False Ready condition), and the constant that declares it."""
    found: dict[str, str] = {}
    for module in modules:
        for name, value in vars(module).items():
            if isinstance(value, Reason) and not name.startswith("_"):
                found.setdefault(str(value), f"{module.__name__}.{name}")
    return found


def named_reasons() -> dict[str, str]:
    """Each reason a DiskferryError subclass declares, a job of the runner ends with, or a
    controller writes as a `Reason`, and where it is declared."""
    modules = every_module()
    reasons = {
        reason: "diskferry.control.runtime.runner.jobs"
        for reason in (BAD_RESULT, CANCELLED, JOB_FAILED, WORKER_LOST)
    }
    for cls in _subclasses(DiskferryError):
        reason = cls.__dict__.get("reason")
        if isinstance(reason, str):
            reasons.setdefault(reason, f"{cls.__module__}.{cls.__qualname__}")
    for reason, where in controller_reasons(modules).items():
        reasons.setdefault(reason, where)
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


def test_the_reasons_controllers_write_are_collected() -> None:
    found = controller_reasons(every_module())
    assert len(found) > 40
    assert found["WaitingForDisk"].startswith("diskferry.control.reconcilers.")
    assert "Pending" in found and "OperationTimeout" in found
