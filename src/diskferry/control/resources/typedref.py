"""A reference to another object of the same namespace, as Kubernetes' TypedLocalObjectReference
(`apiGroup`, `kind`, `name`): each kind it may name is taken with the API groups that name it
here, KubeVirt's as KubeVirt writes them and diskferry's own.

A subclass sets `kind` to its enumeration and `GROUPS` to the groups each kind goes with (None
standing for an unset `apiGroup`). A group that does not go with the kind is refused at
`apiGroup`, and the schema says the same: one `anyOf` branch per kind, and a CEL rule each.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator

from diskferry.control.resources.common import invalid
from diskferry.control.resources.model import GROUP, ApiModel

KUBEVIRT = "kubevirt.io"
SNAPSHOT = "snapshot.kubevirt.io"
BACKUP = "backup.kubevirt.io"
TEMPLATE = "template.kubevirt.io"
CORE = ""
"""The core group, a PersistentVolumeClaim's: KubeVirt writes it as "" or leaves it unset."""

ApiGroup = Literal["diskferry.io", "kubevirt.io", "snapshot.kubevirt.io", "backup.kubevirt.io",
                   "template.kubevirt.io", ""]  # fmt: skip
Groups = Mapping[str, tuple[str | None, ...]]


def groups_text(groups: tuple[str | None, ...]) -> str:
    """The groups as a message lists them: `kubevirt.io, diskferry.io or unset`."""
    names = ['""' if g == CORE else "unset" if g is None else g for g in groups]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _group_rules(schema: dict[str, Any], model: type[TypedReference]) -> None:
    """The pairs of `model.GROUPS` in the schema: an `anyOf` branch per kind, and CEL rules."""
    branches, rules = [], []
    for kind, groups in model.GROUPS.items():
        named = [g for g in groups if g is not None]
        branch: dict[str, Any] = {
            "properties": {"kind": {"enum": [str(kind)]}, "apiGroup": {"enum": named}}
        }
        listed = ", ".join(f"'{g}'" for g in named)
        taken = f"self.apiGroup in [{listed}]"
        if None in groups:
            taken = f"!has(self.apiGroup) || {taken}"
        else:
            branch["required"] = ["apiGroup"]
            taken = f"has(self.apiGroup) && {taken}"
        branches.append(branch)
        rules.append(
            {
                "rule": f"self.kind == '{kind}' ? ({taken}) : true",
                "message": f"a {kind}'s apiGroup is {groups_text(groups)}",
            }
        )
    schema["anyOf"] = branches
    schema["x-kubernetes-validations"] = rules


class TypedReference(ApiModel):
    """An object of this namespace: its kind, the API group that names it, and its name."""

    model_config = ConfigDict(json_schema_extra=_group_rules)

    GROUPS: ClassVar[Groups] = {}
    kind: str = Field(description="The kind of the object.")
    api_group: ApiGroup | None = Field(
        default=None,
        alias="apiGroup",
        validate_default=True,
        description="The API group of the kind: KubeVirt's (kubevirt.io, snapshot.kubevirt.io, "
        'backup.kubevirt.io, template.kubevirt.io, "" for a PersistentVolumeClaim) or '
        f"{GROUP}; which ones a kind goes with is listed with the kind.",
    )
    name: str = Field(min_length=1, description="The object's name, in this namespace.")

    @field_validator("api_group")
    @classmethod
    def _goes_with_the_kind(cls, group: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        groups = cls.GROUPS.get(str(kind)) if kind is not None else None
        if groups is not None and group not in groups:
            raise invalid(f"a {kind}'s apiGroup is {groups_text(groups)}")
        return group
