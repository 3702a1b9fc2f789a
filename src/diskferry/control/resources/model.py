"""The Kubernetes shape every resource has: metadata, spec, status with phase and conditions."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

GROUP = "diskferry.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
READY = "Ready"
"""The condition most kinds carry: whether the object is ready for use."""
IN_USE = "InUse"
"""The condition of a disk or an image: whether a running VirtualMachine holds it."""
RECONCILED = "Reconciled"
"""The manager's condition, on every kind a reconciler reconciles."""
RECONCILED_CONDITION: Mapping[str, str] = {
    RECONCILED: "False (reason ReconcileError, the error as message) while the last reconcile "
    "failed and is retried with backoff; True again once a reconcile after it succeeds.",
}
"""The manager's condition and its meaning, for the declaration of a kind it reconciles."""


class ApiModel(BaseModel):
    """Settings of every API object: camelCase names, unknown fields refused, input not echoed."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, hide_input_in_errors=True)

    def to_json(self) -> dict[str, Any]:
        """The object as JSON-ready values under their API names, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class OwnerReference(ApiModel):
    """An object this one belongs to: deleting the owner deletes this one."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = Field(default=None, alias="blockOwnerDeletion")


class ManagedFieldsEntry(ApiModel):
    """The fields one manager owns, as kube-apiserver's ManagedFieldsEntry and its checks."""

    manager: str = Field(default="", max_length=128)
    operation: Literal["Apply", "Update"]
    api_version: str | None = Field(default=None, alias="apiVersion")
    time: datetime | None = None
    fields_type: Literal["FieldsV1"] | None = Field(default=None, alias="fieldsType")
    fields_v1: dict[str, Any] | None = Field(default=None, alias="fieldsV1")
    subresource: str | None = Field(default=None, max_length=256)

    @field_validator("manager")
    @classmethod
    def _printable(cls, manager: str) -> str:
        if not manager.isprintable():
            raise ValueError("must hold printable characters only")
        return manager

    @field_validator("fields_v1")
    @classmethod
    def _fields_set(cls, tree: dict[str, Any] | None) -> dict[str, Any] | None:
        if tree is not None and not is_fields_v1(tree):
            raise ValueError("a FieldsV1 set holds objects under keys '.', f:, k:, v: or i:")
        return tree


def is_fields_v1(tree: Any) -> bool:
    """Whether `tree` is a FieldsV1 set: objects under keys `.`, `f:`, `k:`, `v:` or `i:`,
    down to `{}` (walked without recursion)."""
    nodes = [tree]
    while nodes:
        node = nodes.pop()
        if not isinstance(node, dict):
            return False
        if any(key != "." and key[:2] not in ("f:", "k:", "v:", "i:") for key in node):
            return False
        nodes.extend(node.values())
    return True


class ObjectMeta(ApiModel):
    """The metadata of every object, as Kubernetes has it."""

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    generate_name: str | None = Field(default=None, alias="generateName")
    namespace: str | None = Field(default=None, pattern=NAME_PATTERN)
    uid: str | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    generation: int | None = None
    creation_timestamp: datetime | None = Field(default=None, alias="creationTimestamp")
    deletion_timestamp: datetime | None = Field(default=None, alias="deletionTimestamp")
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")
    managed_fields: list[ManagedFieldsEntry] | None = Field(default=None, alias="managedFields")


class Reason(str):
    """A reason a controller writes with a Failed phase or a False Ready condition: one
    CamelCase word, declared once as a constant; docs/troubleshooting.md explains each (a test
    collects every constant of this type)."""

    __slots__ = ()


class Condition(ApiModel):
    """One aspect of the object as last observed, in the Kubernetes shape: its type, whether it
    holds, why, and since when."""

    type: str = Field(
        description="What the condition is about, one condition per type; each kind has its "
        "own types (Ready, InUse, Progressing, ...)."
    )
    status: str = Field(
        pattern=r"^(True|False|Unknown)$", description="True, False or Unknown; required."
    )
    reason: str = Field(
        default="",
        description="Why the condition is as it is, as one CamelCase word for programs to "
        "match. Default empty.",
    )
    message: str = Field(
        default="", description="Why the condition is as it is, for people. Default empty."
    )
    last_transition_time: datetime | None = Field(
        default=None,
        alias="lastTransitionTime",
        description="When `status` last changed, in RFC 3339 (2025-01-31T12:00:00Z).",
    )
    observed_generation: int | None = Field(
        default=None,
        alias="observedGeneration",
        description="The `metadata.generation` the condition was written for; lower than the "
        "object's, it predates the latest spec.",
    )


class Status(ApiModel):
    """What every status holds: the phase, the conditions, the generation they describe."""

    phase: str | None = Field(
        default=None,
        description="Where the object is in its life; unset until its controller first looks "
        "at it. The kinds that have phases list them.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="What was last observed about the object, one entry per condition type; "
        "empty until its controller writes one.",
    )
    observed_generation: int | None = Field(
        default=None,
        alias="observedGeneration",
        description="The `metadata.generation` this status was written for; lower than the "
        "object's, the latest spec has not been looked at yet.",
    )


class Resource(ApiModel):
    """An object of one kind: apiVersion, kind, metadata, and the kind's own fields.

    Kinds with a spec and a status declare `spec` and `status` fields; Secret, Event and
    Namespace declare the fields Kubernetes gives them instead.
    """

    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = ""
    CONDITIONS: ClassVar[Mapping[str, str]] = {}
    """The condition types the kind's status may carry, each with what it means on this kind:
    its controllers write no other type."""

    api_version: str = Field(alias="apiVersion")
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
