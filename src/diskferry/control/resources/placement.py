"""Where a VM may run, in the Kubernetes shapes Deckhouse's VirtualMachine and
VirtualMachineClass take: node selectors and node affinity (which this host, a one-node cluster,
meets or not), and the cluster-only rest (VM and Pod affinity, tolerations, topology spread),
accepted with no effect here."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from diskferry.control.resources.common import invalid
from diskferry.control.resources.labelselector import LabelSelector
from diskferry.control.resources.model import ApiModel
from diskferry.control.resources.noeffect import no_effect

ONE_NODE = "this host is the one node, so there is nowhere else to place the VM"
NO_TAINTS = "this host's node has no taints to tolerate"


class NodeOperator(StrEnum):
    """How a node requirement compares a label's value."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeSelectorRequirement(ApiModel):
    """One requirement on a node's labels (or fields): key, operator, values."""

    key: str = Field(min_length=1, description="The label (or field) the requirement is on.")
    operator: NodeOperator = Field(
        description="In, NotIn (values listed), Exists, DoesNotExist (no values), Gt, Lt (one "
        "integer value)."
    )
    values: list[str] = Field(default_factory=list, description="The values compared with.")

    @model_validator(mode="after")
    def _values_fit(self) -> NodeSelectorRequirement:
        op = self.operator
        if op in (NodeOperator.IN, NodeOperator.NOT_IN) and not self.values:
            raise invalid(f"operator {op} needs values")
        if op in (NodeOperator.EXISTS, NodeOperator.DOES_NOT_EXIST) and self.values:
            raise invalid(f"operator {op} takes no values")
        if op in (NodeOperator.GT, NodeOperator.LT) and (
            len(self.values) != 1 or not self.values[0].lstrip("-").isdigit()
        ):
            raise invalid(f"operator {op} takes one integer value")
        return self

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether `labels` meet the requirement."""
        value = labels.get(self.key)
        match self.operator:
            case NodeOperator.IN:
                return value in self.values
            case NodeOperator.NOT_IN:
                return value not in self.values
            case NodeOperator.EXISTS:
                return value is not None
            case NodeOperator.DOES_NOT_EXIST:
                return value is None
        if value is None or not value.lstrip("-").isdigit():
            return False
        bound = int(self.values[0])
        return int(value) > bound if self.operator is NodeOperator.GT else int(value) < bound


class NodeLabelSelector(ApiModel):
    """Nodes by their labels: every label of `matchLabels` and every requirement hold."""

    match_labels: dict[str, str] = Field(
        default_factory=dict, alias="matchLabels", description="Labels a node must have."
    )
    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list,
        alias="matchExpressions",
        description="Requirements on the node's labels, all of which must hold.",
    )

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a node with `labels` is selected (an empty selector selects every node)."""
        wanted = all(labels.get(k) == v for k, v in self.match_labels.items())
        return wanted and all(r.matches(labels) for r in self.match_expressions)


class NodeSelectorTerm(ApiModel):
    """One alternative of a node selector: its requirements all hold."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list,
        alias="matchExpressions",
        description="Requirements on the node's labels.",
    )
    match_fields: list[NodeSelectorRequirement] = Field(
        default_factory=list,
        alias="matchFields",
        description="Requirements on the node's fields (`metadata.name`).",
    )

    def matches(self, labels: dict[str, str], fields: dict[str, str]) -> bool:
        """Whether a node with `labels` and `fields` meets the term."""
        return all(r.matches(labels) for r in self.match_expressions) and all(
            r.matches(fields) for r in self.match_fields
        )


class NodeSelector(ApiModel):
    """Alternatives, one of which a node must meet."""

    node_selector_terms: list[NodeSelectorTerm] = Field(
        alias="nodeSelectorTerms", description="The alternatives; required."
    )

    def matches(self, labels: dict[str, str], fields: dict[str, str]) -> bool:
        """Whether a node with `labels` and `fields` meets one term."""
        return any(t.matches(labels, fields) for t in self.node_selector_terms)


class PreferredSchedulingTerm(ApiModel):
    """A weighted wish for nodes meeting a term."""

    preference: NodeSelectorTerm = Field(description="The term wished for; required.")
    weight: int = Field(ge=1, le=100, description="Its weight, 1 to 100; required.")


class NodeAffinity(ApiModel):
    """Nodes the VM must (or would rather) run on."""

    required: NodeSelector | None = Field(
        default=None,
        alias="requiredDuringSchedulingIgnoredDuringExecution",
        description="Nodes the VM must run on: a VM this host's node does not meet stays "
        "Pending, as an unschedulable Pod does.",
    )
    preferred: list[PreferredSchedulingTerm] = no_effect(
        ONE_NODE,
        "Weighted wishes for nodes.",
        default_factory=list,
        alias="preferredDuringSchedulingIgnoredDuringExecution",
    )


class VmAffinityTerm(ApiModel):
    """VMs and Pods to run near (or away from), by labels, within a topology domain."""

    label_selector: LabelSelector | None = Field(
        default=None, alias="labelSelector", description="The VMs and Pods, by their labels."
    )
    namespace_selector: LabelSelector | None = Field(
        default=None, alias="namespaceSelector", description="Their namespaces, by labels."
    )
    namespaces: list[str] = Field(default_factory=list, description="Their namespaces, named.")
    topology_key: str = Field(
        alias="topologyKey", min_length=1, description="The node label that makes a domain."
    )
    match_label_keys: list[str] = Field(
        default_factory=list, alias="matchLabelKeys", description="Label keys also matched."
    )
    mismatch_label_keys: list[str] = Field(
        default_factory=list, alias="mismatchLabelKeys", description="Label keys not matched."
    )


class WeightedVmAffinityTerm(ApiModel):
    """A weighted wish to run near (or away from) VMs and Pods."""

    weight: int = Field(ge=1, le=100, description="Its weight, 1 to 100; required.")
    term: VmAffinityTerm = Field(
        alias="virtualMachineAndPodAffinityTerm", description="The term wished for; required."
    )


class VmAffinityRules(ApiModel):
    """Hard and soft rules towards other VMs and Pods."""

    required: list[VmAffinityTerm] = Field(
        default_factory=list,
        alias="requiredDuringSchedulingIgnoredDuringExecution",
        description="Terms that must hold.",
    )
    preferred: list[WeightedVmAffinityTerm] = Field(
        default_factory=list,
        alias="preferredDuringSchedulingIgnoredDuringExecution",
        description="Weighted wishes.",
    )


class VmAffinity(ApiModel):
    """Deckhouse's VM affinity: towards nodes, and towards or away from VMs and Pods."""

    node_affinity: NodeAffinity | None = Field(
        default=None, alias="nodeAffinity", description="Nodes the VM must or would rather run on."
    )
    vm_affinity: VmAffinityRules | None = no_effect(
        ONE_NODE,
        "VMs and Pods to run near.",
        default=None,
        alias="virtualMachineAndPodAffinity",
    )
    vm_anti_affinity: VmAffinityRules | None = no_effect(
        ONE_NODE,
        "VMs and Pods to run away from.",
        default=None,
        alias="virtualMachineAndPodAntiAffinity",
    )


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    """What a taint does to what does not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    """A taint tolerated, as a Pod's toleration."""

    key: str | None = Field(default=None, description="The taint's key (all when empty).")
    operator: TolerationOperator | None = Field(
        default=None, description="Exists or Equal (the default)."
    )
    value: str | None = Field(default=None, description="The taint's value, for Equal.")
    effect: TaintEffect | None = Field(
        default=None, description="NoSchedule, PreferNoSchedule or NoExecute (all when empty)."
    )
    toleration_seconds: int | None = Field(
        default=None, alias="tolerationSeconds", description="How long a NoExecute is borne."
    )


class Unsatisfiable(StrEnum):
    """What to do with a VM that cannot be spread as asked."""

    DO_NOT_SCHEDULE = "DoNotSchedule"
    SCHEDULE_ANYWAY = "ScheduleAnyway"


class TopologySpreadConstraint(ApiModel):
    """How VMs and Pods matching a selector spread over topology domains."""

    max_skew: int = Field(alias="maxSkew", ge=1, description="The most uneven spread; required.")
    topology_key: str = Field(
        alias="topologyKey", min_length=1, description="The node label that makes a domain."
    )
    when_unsatisfiable: Unsatisfiable = Field(
        alias="whenUnsatisfiable", description="DoNotSchedule or ScheduleAnyway; required."
    )
    label_selector: LabelSelector | None = Field(
        default=None, alias="labelSelector", description="The VMs and Pods counted."
    )
