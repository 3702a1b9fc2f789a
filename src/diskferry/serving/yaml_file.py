"""Small YAML files (routes, TLS settings) read into pydantic models; any fault a typed error."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel

from diskferry.disk.errors import DiskferryError

Model = TypeVar("Model", bound=BaseModel)


def read_yaml_model(
    path: Path, model: type[Model], error: type[DiskferryError], what: str
) -> Model:
    """The `model` that the YAML file `path` holds (an empty file gives its defaults).

    Whatever is wrong with the file, unreadable, not UTF-8, not YAML, nested past
    Python's limits or not the model, raises `error` with one line naming `what`.
    """
    try:
        return model.model_validate(yaml.safe_load(path.read_text()) or {})
    except (OSError, ValueError, yaml.YAMLError) as e:
        # ValueError covers text that is not UTF-8 and pydantic's ValidationError
        raise error(f"cannot read {what} {path}: {_first_line(e)}") from e
    except RecursionError as e:
        raise error(f"cannot read {what} {path}: it is nested too deeply") from e


def _first_line(e: Exception) -> str:
    lines = str(e).splitlines()
    return lines[0] if lines else type(e).__name__
