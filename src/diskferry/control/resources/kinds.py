"""The kinds the API serves: each one's names, scope, model and print columns, in one registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diskferry.control.errors import NotFoundError
from diskferry.control.resources.model import Resource

KUBE_MINOR = "32"
"""The Kubernetes API level served (1.32): what discovery announces and the schemas it checks."""


@dataclass(frozen=True)
class Column:
    """One print column, as a CRD's additionalPrinterColumns has it."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""
    # the cell when the path selects nothing, as a core kind's printer shows a field's default
    default: Any = None


AGE = Column("Age", ".metadata.creationTimestamp", "date")


@dataclass(frozen=True)
class KindInfo:
    """What the store, the API and the CRDs need to know of one kind."""

    group: str
    version: str
    kind: str
    plural: str
    model: type[Resource]
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    columns: tuple[Column, ...] = (AGE,)
    has_status: bool = True
    categories: tuple[str, ...] = ()
    # beside metadata.name and metadata.namespace, as a CRD's selectableFields; any other is 400
    field_selectors: tuple[str, ...] = ("status.phase",)
    # a Table row's Name cell when it says more than the name (a StorageClass's "(default)")
    row_name: Callable[[dict[str, Any]], str] | None = None
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def singular(self) -> str:
        """The kind in lower case, as kubectl accepts it."""
        return self.kind.lower()

    @property
    def api_version(self) -> str:
        """`group/version`, or the version alone for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_kind(self) -> str:
        """`Kind.group` as Kubernetes' messages name a kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


@dataclass
class Registry:
    """Every kind served, found by kind, by plural or by any name kubectl accepts."""

    kinds: list[KindInfo] = field(default_factory=list)

    def add(self, info: KindInfo) -> KindInfo:
        """Serve `info`'s kind; returns it."""
        self.kinds.append(info)
        return info

    def by_kind(self, kind: str, group: str | None = None) -> KindInfo:
        """The kind named `kind` (in `group`, when given)."""
        for info in self.kinds:
            if info.kind == kind and (group is None or info.group == group):
                return info
        raise NotFoundError(f"the server does not serve the kind {kind!r}")

    def by_plural(self, group: str, version: str, plural: str) -> KindInfo:
        """The kind at `/apis/group/version/plural` (group "" for `/api/v1`)."""
        for info in self.kinds:
            if (info.group, info.version, info.plural) == (group, version, plural):
                return info
        where = f"{group}/{version}" if group else version
        raise NotFoundError(f"the server could not find the requested resource {plural} in {where}")

    def lookup(self, name: str) -> KindInfo:
        """The kind a user names by kind, plural, singular or short name, in any case."""
        wanted = name.lower()
        for info in self.kinds:
            names = {info.kind.lower(), info.plural, info.singular, *info.short_names}
            if wanted in names or wanted in {f"{n}.{info.group}" for n in names}:
                return info
        raise NotFoundError(f'the server doesn\'t have a resource type "{name}"')

    def groups(self) -> dict[str, list[KindInfo]]:
        """The kinds by API group-version (`v1` for the core group)."""
        out: dict[str, list[KindInfo]] = {}
        for info in self.kinds:
            out.setdefault(info.api_version, []).append(info)
        return out
