"""A cluster's own kinds, which diskferry does not reconcile, served as plain objects by the
stand-in API server that tests the cluster shape (as envtest serves them to Go operators).

Pods, Nodes, Services, claims, Deployments, Leases, RBAC, CRDs, Routes, Ingresses and
KubeVirt's kinds are stored, listed, watched and patched as any kind is, and nothing acts on
them. A kind of Kubernetes' own groups is checked against its JSON schema from
kubernetes-validate (a test dependency: only the stand-in imports this module); one of another
group (KubeVirt's, OpenShift's) is kept as given, as a CRD with
`x-kubernetes-preserve-unknown-fields` keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, ClassVar

import kubernetes_validate
from pydantic import ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from diskferry.control.resources.kinds import AGE, KUBE_MINOR, Column, KindInfo, Registry
from diskferry.control.resources.model import Resource

SCHEMA_VERSION = f"1.{KUBE_MINOR}"
UNKNOWN = "extra_forbidden"  # what validation.validate drops on fieldValidation Warn or Ignore
MESSAGE_LENGTH = 200


def _kubernetes_group(group: str) -> bool:
    """Whether `group` is one of Kubernetes' own, whose schemas kubernetes-validate has."""
    return group in ("", "apps") or group.endswith(".k8s.io")


def _message(error: kubernetes_validate.ValidationError) -> str:
    """What is wrong, in the schema's words, without the value sent (which may be secret)."""
    if error.validator == "required":
        return error.message  # names the missing field, not a value
    if error.validator == "type":
        wanted = error.validator_value
        types = wanted if isinstance(wanted, list) else [wanted]
        return f"must be of type {' or '.join(t for t in types if t != 'null')}"
    rule = json.dumps(error.validator_value, sort_keys=True)
    if len(rule) > MESSAGE_LENGTH:
        rule = rule[:MESSAGE_LENGTH] + "..."
    return f"does not satisfy {error.validator}: {rule}"


def _errors(error: kubernetes_validate.ValidationError) -> list[InitErrorDetails]:
    """The schema's error as pydantic's: each unknown field as `extra_forbidden` at its path."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = (error.schema or {}).get("properties") or {}
        return [
            InitErrorDetails(type=UNKNOWN, loc=(*path, key), input=None)
            for key in error.instance
            if key not in known
        ]
    return [
        InitErrorDetails(
            type=PydanticCustomError("schema", "{message}", {"message": _message(error)}),
            loc=path,
            input=None,
        )
    ]


class ForeignResource(Resource):
    """An object of a cluster's own kind: metadata as every kind has it, the rest as given,
    checked against the kind's Kubernetes schema when it has one."""

    model_config = ConfigDict(extra="allow")
    CHECKED: ClassVar[bool] = False
    """Whether the kind's Kubernetes schema is checked."""

    @model_validator(mode="before")
    @classmethod
    def _schema(cls, data: Any) -> Any:
        if not (cls.CHECKED and isinstance(data, dict)):
            return data
        try:
            kubernetes_validate.validate(data, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            # pydantic keeps the errors' paths when a validator raises its ValidationError
            raise ValidationError.from_exception_data(cls.__name__, _errors(error)) from None
        return data


def foreign(
    group: str,
    version: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool = True,
    status: bool = True,
    short_names: tuple[str, ...] = (),
    field_selectors: tuple[str, ...] = (),
    columns: tuple[Column, ...] = (AGE,),
) -> KindInfo:
    """A cluster's kind served without a controller; `status` when the real kind has a status
    subresource."""
    api_version = f"{group}/{version}" if group else version
    model = type(
        kind,
        (ForeignResource,),
        {
            "__module__": __name__,
            "__doc__": f"A {kind} ({api_version}), stored as given.",
            "API_VERSION": api_version,
            "KIND": kind,
            "CHECKED": _kubernetes_group(group),
        },
    )
    return KindInfo(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        model=model,
        namespaced=namespaced,
        short_names=short_names,
        columns=columns,
        has_status=status,
        field_selectors=field_selectors,
    )


PHASE = Column("Status", ".status.phase")
RBAC = "rbac.authorization.k8s.io"

FOREIGN_KINDS = (
    foreign(
        "",
        "v1",
        "Pod",
        "pods",
        short_names=("po",),
        field_selectors=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
        ),
        columns=(
            PHASE,
            Column("IP", ".status.podIP", priority=1),
            Column("Node", ".spec.nodeName", priority=1),
            AGE,
        ),
    ),
    foreign("", "v1", "Node", "nodes", namespaced=False, short_names=("no",)),
    foreign(
        "",
        "v1",
        "Service",
        "services",
        short_names=("svc",),
        columns=(Column("Type", ".spec.type"), Column("Cluster-IP", ".spec.clusterIP"), AGE),
    ),
    foreign(
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        short_names=("pvc",),
        columns=(PHASE, Column("Volume", ".spec.volumeName"), AGE),
    ),
    foreign(
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        namespaced=False,
        short_names=("pv",),
        columns=(PHASE, Column("Claim", ".spec.claimRef.name"), AGE),
    ),
    foreign("", "v1", "ConfigMap", "configmaps", status=False, short_names=("cm",)),
    foreign("", "v1", "ServiceAccount", "serviceaccounts", status=False, short_names=("sa",)),
    foreign(
        "apps",
        "v1",
        "Deployment",
        "deployments",
        short_names=("deploy",),
        columns=(
            Column("Replicas", ".spec.replicas", "integer"),
            Column("Available", ".status.availableReplicas", "integer"),
            AGE,
        ),
    ),
    foreign(
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        status=False,
        columns=(Column("Holder", ".spec.holderIdentity"), AGE),
    ),
    foreign(RBAC, "v1", "ClusterRole", "clusterroles", namespaced=False, status=False),
    foreign(
        RBAC, "v1", "ClusterRoleBinding", "clusterrolebindings", namespaced=False, status=False
    ),
    foreign(RBAC, "v1", "Role", "roles", status=False),
    foreign(RBAC, "v1", "RoleBinding", "rolebindings", status=False),
    foreign(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
        short_names=("crd", "crds"),
    ),
    foreign("route.openshift.io", "v1", "Route", "routes"),
    foreign("networking.k8s.io", "v1", "Ingress", "ingresses", short_names=("ing",)),
    # no short names where diskferry's own kinds of the same name have them (vm, vmbackup)
    foreign("kubevirt.io", "v1", "VirtualMachine", "virtualmachines"),
    foreign(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
        "virtualmachineinstances",
        short_names=("vmi", "vmis"),
    ),
    foreign("backup.kubevirt.io", "v1alpha1", "VirtualMachineBackup", "virtualmachinebackups"),
    foreign(
        "backup.kubevirt.io",
        "v1alpha1",
        "VirtualMachineBackupTracker",
        "virtualmachinebackuptrackers",
    ),
)


def with_foreign_kinds(registry: Registry, kinds: Iterable[KindInfo] = FOREIGN_KINDS) -> Registry:
    """`registry`'s kinds, then the cluster's `kinds`: a kind named in both groups (a
    VirtualMachine) is found as `registry`'s when asked for by kind or short name alone."""
    return Registry([*registry.kinds, *kinds])
