"""StorageClass (storage.k8s.io/v1): where claims live, as files or as loop block devices."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Literal

from pydantic import Field, field_validator

from diskferry.control.kinds import AGE, Column, KindInfo
from diskferry.control.model import ApiModel, Resource
from diskferry.control.resources.common import invalid
from diskferry.control.resources.noeffect import no_effect

PROVISIONER = "diskferry.io/local"
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
    """The directory claims are kept in (the data directory's when unset), and their type; a
    directory of its own must be one that only root or the daemon's user can write, below
    folders others cannot change (claims are then refused, saying why)."""

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


class StorageClass(Resource):
    """A class of storage claims are made in; the one annotated default serves unnamed claims.

    With the provisioner diskferry.io/local, claims are files in the directory `parameters.path`
    (the data directory's volumes/CLASS/ when unset; reflink clones where the file system
    allows), or with `parameters.type: block` loop devices over sparse files there. The class
    annotated storageclass.kubernetes.io/is-default-class: "true" serves claims that name none,
    and `kubectl get storageclass` shows it as `NAME (default)`; the class `local` is made when
    the daemon starts. A class's provisioner, parameters, reclaimPolicy and volumeBindingMode are
    fixed once it is made.
    """

    api_version: Literal["storage.k8s.io/v1"] = Field(
        default="storage.k8s.io/v1", alias="apiVersion"
    )
    kind: Literal["StorageClass"] = "StorageClass"
    provisioner: Literal["diskferry.io/local"] = Field(
        default=PROVISIONER,
        description="diskferry.io/local (the default and only one): claims on this host. "
        "Fixed once made.",
    )
    parameters: StorageClassParameters = Field(
        default_factory=StorageClassParameters,
        description="Where and how claims are kept; fixed once made.",
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
        "them; here a claim is made when its disk or image needs it either way. Fixed once "
        "made.",
    )
    allow_volume_expansion: bool = no_effect(
        "every class's disks may grow here",
        "Whether a disk of this class may grow: true (the default) or false.",
        default=True,
        alias="allowVolumeExpansion",
    )

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
