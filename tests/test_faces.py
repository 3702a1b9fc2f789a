"""Each package's public face, the `__all__` of its `__init__.py`: every name it lists is there,
none is hidden by a module of the same name, importing the face loads none of the modules
behind it, an engine's face offers every job model and result the engine defines, and the
reconcilers take nothing else from an engine's face (import-linter sees modules, not names)."""

from __future__ import annotations

import ast
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import types
from enum import Enum
from pathlib import Path

import pytest
from pydantic import BaseModel

PACKAGES = (
    "base",
    "disk",
    "worker",
    "nbd",
    "qemu",
    "objstore",
    "registry",
    "serving",
    "importer",
    "export",
    "backup",
)
ENGINES = ("importer", "export", "backup")

_LOADED = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted(m for m in sys.modules if m.startswith("diskferry."))))
"""


def _modules(package: str) -> set[str]:
    """The names of the modules in `diskferry.<package>`."""
    face = importlib.import_module(f"diskferry.{package}")
    return {info.name for info in pkgutil.iter_modules(face.__path__)}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_a_face_lists_is_there(package: str) -> None:
    face = importlib.import_module(f"diskferry.{package}")
    assert face.__all__, package
    modules = [name for name in face.__all__ if isinstance(getattr(face, name), types.ModuleType)]
    assert modules == []
    assert set(face.__all__) <= set(dir(face))


@pytest.mark.parametrize("package", PACKAGES)
def test_no_name_of_a_face_is_a_module_of_its_package(package: str) -> None:
    # once `diskferry.disk.copy` is imported, the attribute `copy` of the package is that module
    face = importlib.import_module(f"diskferry.{package}")
    assert _modules(package) & set(face.__all__) == set()


@pytest.mark.parametrize("package", PACKAGES)
def test_importing_a_face_loads_none_of_the_modules_behind_it(package: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _LOADED, f"diskferry.{package}"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ,
        timeout=60,
    )
    loaded = set(json.loads(proc.stdout))
    assert loaded <= {f"diskferry.{package}", "diskferry.base", "diskferry.base.faces"}, loaded


def _job_models_and_results(engine: str) -> set[str]:
    """The job models (and the models they hold), and the pydantic models named `...Result`,
    that `engine` defines; every pydantic model of a `job` module is one or the other."""
    from diskferry.worker import JobModel

    found = set()
    for name in _modules(engine):
        module = importlib.import_module(f"diskferry.{engine}.{name}")
        for attr, value in vars(module).items():
            if not isinstance(value, type) or value.__module__ != module.__name__:
                continue
            if attr.startswith("_") or not issubclass(value, BaseModel):
                continue
            if issubclass(value, JobModel) or attr.endswith("Result") or name.endswith("job"):
                found.add(attr)
    return found


@pytest.mark.parametrize("engine", ENGINES)
def test_an_engine_face_offers_every_job_model_and_result(engine: str) -> None:
    face = importlib.import_module(f"diskferry.{engine}")
    defined = _job_models_and_results(engine)
    assert defined, engine
    assert defined - set(face.__all__) == set()


def test_reconcilers_take_only_job_models_results_and_phases_from_an_engine_face() -> None:
    reconcilers = importlib.import_module("diskferry.control.reconcilers")
    faces = {f"diskferry.{engine}" for engine in ENGINES}
    taken = []
    for folder in reconcilers.__path__:
        for path in sorted(Path(folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or node.module not in faces:
                    continue
                face = importlib.import_module(node.module)
                for alias in node.names:
                    value = getattr(face, alias.name)
                    if not (isinstance(value, type) and issubclass(value, BaseModel | Enum)):
                        taken.append(f"{path.name}: {node.module}.{alias.name}")
    assert taken == []
