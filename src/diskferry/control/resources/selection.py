"""What a Backup and a Restore share in Velero's shape: which namespaces, resources and labels
they take, and Velero's checks of those filters (its FailedValidation messages)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from diskferry.control.resources.labelselector import LabelSelector
from diskferry.control.resources.model import ApiModel


def _empty_object_as_list(value: Any) -> Any:
    return [] if value == {} else value


Names = Annotated[list[str], BeforeValidator(_empty_object_as_list)]
"""A list of names or globs; `{}` reads as an empty list, as Velero's documented samples write
an unset filter."""

RESOURCES = (
    " A resource is named as kubectl names it: kind, plural, singular or short name, with or "
    "without its group (`virtualmachines`, `VirtualMachine`, `vm`, "
    "`virtualmachines.diskferry.io`); `*` is every resource. Here the resources a backup takes "
    "are VirtualMachines, the VirtualDisks they use, and the VirtualImages and "
    "ClusterVirtualImages they mount (manifests only); other names match nothing."
)


class Selection(ApiModel):
    """Namespaces (globs), resources and labels, as Velero's Backup and Restore filter them."""

    included_namespaces: Names = Field(
        default_factory=list,
        alias="includedNamespaces",
        description="Namespaces taken, as globs (`*`, `?`, `[abc]`); empty or `*`: all.",
    )
    excluded_namespaces: Names = Field(
        default_factory=list,
        alias="excludedNamespaces",
        description="Namespaces left out, as globs; they win over includedNamespaces.",
    )
    included_resources: Names = Field(
        default_factory=list,
        alias="includedResources",
        description="Resources taken; empty or `*`: all." + RESOURCES,
    )
    excluded_resources: Names = Field(
        default_factory=list,
        alias="excludedResources",
        description="Resources left out; they win over includedResources." + RESOURCES,
    )
    include_cluster_resources: bool | None = Field(
        default=None,
        alias="includeClusterResources",
        description="Whether cluster-scoped resources are taken: here the ClusterVirtualImages "
        "the VMs mount, as manifests. Unset: only when every namespace is taken and none "
        "left out.",
    )
    label_selector: LabelSelector | None = Field(
        default=None,
        alias="labelSelector",
        description="The VirtualMachines taken must match it (their disks and images follow "
        "them). Not with orLabelSelectors.",
    )
    or_label_selectors: list[LabelSelector] = Field(
        default_factory=list,
        alias="orLabelSelectors",
        description="The VirtualMachines taken must match one of these. Not with labelSelector.",
    )

    def selection_errors(self) -> list[str]:
        """Velero's validation errors of these filters."""
        if self.label_selector is not None and self.or_label_selectors:
            return [
                "encountered labelSelector as well as orLabelSelectors in the spec, only one "
                "can be specified"
            ]
        return []

    def labels_match(self, labels: dict[str, str]) -> bool:
        """Whether an object with `labels` passes labelSelector or orLabelSelectors."""
        if self.or_label_selectors:
            return any(s.matches(labels) for s in self.or_label_selectors)
        return self.label_selector is None or self.label_selector.matches(labels)

    def namespace_taken(self, namespace: str) -> bool:
        """Whether the namespace passes includedNamespaces and excludedNamespaces."""
        if any(fnmatchcase(namespace, glob) for glob in self.excluded_namespaces):
            return False
        included = self.included_namespaces
        return not included or any(fnmatchcase(namespace, glob) for glob in included)

    def all_namespaces(self) -> bool:
        """Whether every namespace is taken and none left out."""
        return not self.excluded_namespaces and set(self.included_namespaces) <= {"*"}
