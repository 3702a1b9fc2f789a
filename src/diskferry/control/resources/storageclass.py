"""StorageClass (storage.k8s.io/v1): where claims live: on this host, as files or as loop block
devices (the provisioner diskferry.io/local), or in a cluster, as its provisioner makes them."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from diskferry.control.resources.common import invalid
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import ApiModel, Resource
from diskferry.control.resources.noeffect import no_effect

PROVISIONER = "diskferry.io/local"
PROVISIONER_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
"""A provisioner's name as Kubernetes takes it: a qualified name (`rbd.csi.ceph.com`,
`kubernetes.io/no-provisioner`)."""
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
BETA_DEFAULT_CLASS_ANNOTATION = "storageclass.beta.kubernetes.io/is-default-class"


def is_default_class(annotations: Mapping[str, str]) -> bool:
    """Whether `annotations` make a class the default, as Kubernetes reads them (the
    annotation, or its beta name, is "true")."""
    marks = (DEFAULT_CLASS_ANNOTATION, BETA_DEFAULT_CLASS_ANNOTATION)
    return any(annotations.get(mark) == "true" for mark in marks)


class VolumeType(StrEnum):
    """What a claim is: a file in the directory, or a loop device over a sparse file there."""

    FILE = "file"
    BLOCK = "block"


class ReclaimPolicy(StrEnum):
    """What happens to a claim's data when its disk is deleted."""

    DELETE = "Delete"
    RETAIN = "Retain"


class VolumeBindingMode(StrEnum):
    """When a claim is made: at once, or when a machine first uses it."""

    IMMEDIATE = "Immediate"
    WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


class StorageClassParameters(ApiModel):
    """The parameters of a diskferry.io/local class: the directory claims are kept in (the data
    directory's when unset), and their type; a directory of its own must be one that only root
    or the daemon's user can write, below folders others cannot change (claims are then
    refused, saying why)."""

    path: str | None = Field(
        default=None,
        description="The absolute, normal directory the claims are kept in. Default: "
        "DATA_DIR/volumes/<class>.",
    )
    type: VolumeType = Field(
        default=VolumeType.FILE,
        description="file (the default): each claim a sparse file; block: each claim a loop "
        "block device over a sparse file, where the kernel offers loop devices.",
    )

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not PurePosixPath(value).is_absolute():
            raise invalid("must be an absolute directory")
        if value is not None and ("\0" in value or posixpath.normpath(value) != value):
            raise invalid("must be a normal path: no '..', '.', '//', trailing '/' or NUL")
        return value


class TopologySelectorRequirement(ApiModel):
    """Nodes whose label `key` has one of `values`."""

    key: str = Field(description="The label's key (topology.kubernetes.io/zone, ...).")
    values: list[str] = Field(description="The values the label may have.")


class TopologySelectorTerm(ApiModel):
    """Nodes that match every expression."""

    match_label_expressions: list[TopologySelectorRequirement] = Field(
        default_factory=list,
        alias="matchLabelExpressions",
        description="The labels a node must have.",
    )


class StorageClass(Resource):
    """A class of storage claims are made in; the one annotated default serves unnamed claims.

    With the provisioner diskferry.io/local, claims are files in the directory `parameters.path`
    (the data directory's volumes/CLASS/ when unset; reflink clones where the file system
    allows), or with `parameters.type: block` loop devices over sparse files there. A class of
    another provisioner (a cluster's CSI driver: rbd.csi.ceph.com, topolvm.io, ...) is taken as
    a cluster has it, parameters and all: `diskferry operator` makes its claims as PVCs, each
    of the volume mode and access mode its annotations
    virtualdisk.virtualization.deckhouse.io/volume-mode and /access-mode name, else the most
    capable its provisioner is known to offer (CDI's StorageProfile defaults), else
    ReadWriteOnce Filesystem; `diskferry serve` cannot provision it, and a disk or image of it
    waits, saying so. The class annotated storageclass.kubernetes.io/is-default-class: "true"
    serves claims that name none, and `kubectl get storageclass` shows it as `NAME (default)`;
    the class `local` is made when the daemon starts. A class's provisioner, parameters,
    reclaimPolicy and volumeBindingMode are fixed once it is made.
    """

    api_version: Literal["storage.k8s.io/v1"] = Field(
        default="storage.k8s.io/v1", alias="apiVersion"
    )
    kind: Literal["StorageClass"] = "StorageClass"
    provisioner: str = Field(
        default=PROVISIONER,
        pattern=PROVISIONER_PATTERN,
        description="Who makes the claims: diskferry.io/local (the default), this host, or a "
        "cluster's provisioner (its CSI driver's name), whose claims only a cluster makes. "
        "Fixed once made.",
    )
    parameters: dict[str, str] | None = Field(
        default=None,
        description="What the provisioner is told, as strings. For diskferry.io/local: `path`, "
        "the absolute, normal directory the claims are kept in (default DATA_DIR/volumes/"
        "<class>), and `type`, file (the default: each claim a sparse file) or block (each "
        "claim a loop block device over a sparse file, where the kernel offers loop devices); "
        "no other. For another provisioner, whatever it reads (a Ceph pool, a file system "
        "type...), kept as given. Fixed once made.",
    )
    reclaim_policy: ReclaimPolicy = Field(
        default=ReclaimPolicy.DELETE,
        alias="reclaimPolicy",
        description="Delete (the default): a claim is removed with its disk or image; Retain: "
        "it is kept. Fixed once made.",
    )
    volume_binding_mode: VolumeBindingMode = Field(
        default=VolumeBindingMode.IMMEDIATE,
        alias="volumeBindingMode",
        description="Immediate (the default) or WaitForFirstConsumer, as Kubernetes names "
        "them; on this host a claim is made when its disk or image needs it either way, and in "
        "a cluster the worker Pod that writes a claim is its first consumer. Fixed once made.",
    )
    allow_volume_expansion: bool = no_effect(
        "every class's disks may grow here",
        "Whether a disk of this class may grow: true (the default) or false.",
        default=True,
        alias="allowVolumeExpansion",
    )
    mount_options: list[str] | None = Field(
        default=None,
        alias="mountOptions",
        description="The options a cluster's provisioner mounts the volumes of this class with; "
        "refused in a class of diskferry.io/local, whose claims are files on this host.",
    )
    allowed_topologies: list[TopologySelectorTerm] | None = Field(
        default=None,
        alias="allowedTopologies",
        description="The nodes (by their labels) where a cluster's provisioner may make a "
        "volume of this class; refused in a class of diskferry.io/local, whose claims are on "
        "this host.",
    )

    @field_validator("parameters")
    @classmethod
    def _local_parameters(
        cls, value: dict[str, str] | None, info: ValidationInfo
    ) -> dict[str, str] | None:
        if value is not None and info.data.get("provisioner") == PROVISIONER:
            StorageClassParameters.model_validate(value)
        return value

    @field_validator("mount_options", "allowed_topologies")
    @classmethod
    def _cluster_only(cls, value: list[Any] | None, info: ValidationInfo) -> list[Any] | None:
        if value and info.data.get("provisioner") == PROVISIONER:
            raise invalid(f"a class of {PROVISIONER} has none: its claims are on this host")
        return value

    @property
    def local(self) -> bool:
        """Whether this host provisions the class's claims (diskferry.io/local)."""
        return self.provisioner == PROVISIONER

    @property
    def local_parameters(self) -> StorageClassParameters:
        """The parameters of a diskferry.io/local class (a class of another provisioner has
        none of its own)."""
        given = self.parameters if self.local else None
        return StorageClassParameters.model_validate(given or {})

    @property
    def is_default(self) -> bool:
        """Whether this is the default class, as its annotations say."""
        return is_default_class(self.metadata.annotations)


def _row_name(obj: dict[str, Any]) -> str:
    """The name kubectl shows: the default class's ends in " (default)", as kube-apiserver's
    Table has it."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    return f"{name} (default)" if is_default_class(meta.get("annotations") or {}) else name


STORAGE_CLASSES = KindInfo(
    group="storage.k8s.io",
    version="v1",
    kind="StorageClass",
    plural="storageclasses",
    model=StorageClass,
    namespaced=False,
    short_names=("sc",),
    has_status=False,
    field_selectors=(),
    columns=(
        Column("Provisioner", ".provisioner"),
        Column("ReclaimPolicy", ".reclaimPolicy", default=ReclaimPolicy.DELETE.value),
        Column(
            "VolumeBindingMode",
            ".volumeBindingMode",
            default=VolumeBindingMode.IMMEDIATE.value,
        ),
        Column("AllowVolumeExpansion", ".allowVolumeExpansion", "boolean", default=True),
        AGE,
    ),
    row_name=_row_name,
)
