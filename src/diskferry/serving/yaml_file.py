"""Small YAML files (routes, TLS settings) read into pydantic models; any fault a typed error."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from diskferry.base.errors import DiskferryError

Model = TypeVar("Model", bound=BaseModel)


def read_yaml_model(
    path: Path, model: type[Model], error: type[DiskferryError], what: str
) -> Model:
    """The `model` that the YAML file `path` holds (an empty file gives its defaults).

    Whatever is wrong with the file, unreadable, not UTF-8, not YAML, nested past
    Python's limits or not the model, raises `error` with one line naming `what`; a file
    that is not the model names each field at fault and its line.
    """
    try:
        text = path.read_text()
        try:
            return model.model_validate(yaml.safe_load(text) or {})
        except ValidationError as e:
            raise error(f"cannot read {what} {path}: {_located(text, e)}") from e
    except (OSError, ValueError, yaml.YAMLError) as e:
        # ValueError covers text that is not UTF-8
        raise error(f"cannot read {what} {path}: {_first_line(e)}") from e
    except RecursionError as e:
        raise error(f"cannot read {what} {path}: it is nested too deeply") from e


def _located(text: str, e: ValidationError) -> str:
    """Each of pydantic's errors as `field.path: message (line N)`, joined by `; `."""
    root = yaml.compose(text)
    found = []
    for err in e.errors(include_url=False, include_input=False):
        loc = err["loc"]
        node = _node_at(root, loc)
        line = f" (line {node.start_mark.line + 1})" if node is not None else ""
        found.append(f"{_dotted(loc) or 'the file'}: {err['msg']}{line}")
    return "; ".join(found)


def _dotted(loc: tuple[Any, ...]) -> str:
    """A pydantic location as `exports[0].url`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def _node_at(root: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """The deepest YAML node on the way to `loc` (a missing field: the mapping that lacks it)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            keyed = [(k, v) for k, v in node.value if k.value == str(part)]
            if not keyed:
                return node
            key, value = keyed[0]
            # a field that is not allowed is at its key; any other fault at its value
            node = value if isinstance(value, yaml.CollectionNode) else key
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def _first_line(e: Exception) -> str:
    lines = str(e).splitlines()
    return lines[0] if lines else type(e).__name__
