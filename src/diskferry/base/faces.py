"""A package's public face: its names, each loaded from the module defining it when first used.

A package's `__init__.py` names its face with `lazy_face`, so that importing the package
loads none of its modules (nor the libraries they bring in) until a caller takes a name
(PEP 562). A face name must not be the name of a module of its package: importing that
module would set the package's attribute to the module.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing is not imported for this module's annotations alone
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_face(
    package: str, homes: Mapping[str, tuple[str, ...]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """`__all__`, `__getattr__` and `__dir__` for `package`, whose public names are those that
    `homes` lists under the module of the package that defines each; `"attr as name"` gives
    the module's `attr` the public name `name`."""
    where: dict[str, tuple[str, str]] = {}
    for module, names in homes.items():
        for entry in names:
            attr, _, public = entry.partition(" as ")
            where[public or attr] = (module, attr)

    def face_getattr(name: str) -> Any:
        """The public `name`, imported from its module now and kept on the package."""
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = where[name]
        # __import__ as an import statement calls it, so that -X importtime lists the module
        value = getattr(__import__(f"{package}.{module}", fromlist=(attr,)), attr)
        setattr(sys.modules[package], name, value)
        return value

    def face_dir() -> list[str]:
        """The package's attributes and its public names."""
        return sorted({*vars(sys.modules[package]), *where})

    return sorted(where), face_getattr, face_dir
