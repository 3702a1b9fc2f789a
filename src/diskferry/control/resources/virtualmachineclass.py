"""VirtualMachineClass, Deckhouse's shape: the virtual CPU a VM gets, the nodes it may run on,
and the sizes (cores, memory, core fractions) a VM of the class may ask for.

Cluster-scoped. `spec.cpu` chooses QEMU's `-cpu`: Host and HostPassthrough the host's CPU,
Model the named QEMU model (`qemu-system-x86_64 -cpu help`), Features QEMU's baseline model
with the listed features, Discovery QEMU's baseline model (the one host is the only node whose
features would be intersected). A VM's cores, memory and coreFraction must fit the sizing
policy whose core range holds its cores, as Deckhouse checks them; a VM that does not stays
Pending, saying which field to change. The class named `generic`, as Deckhouse installs it, is
there from the daemon's first start; the class annotated
`virtualmachineclass.diskferry.io/is-default-class: "true"` serves VMs that name none.
"""

from __future__ import annotations

from enum import StrEnum
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import Field, WithJsonSchema, model_validator

from diskferry.control.resources.common import ApiVersion, Quantity, invalid
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    READY,
    RECONCILED_CONDITION,
    VERSION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.noeffect import no_effect
from diskferry.control.resources.placement import (
    NO_TAINTS,
    NodeLabelSelector,
    Toleration,
)

DEFAULT_CLASS_ANNOTATION = "virtualmachineclass.diskferry.io/is-default-class"
"""A class annotated with this key and "true" serves the VMs that name no class."""
GENERIC = "generic"


class CpuType(StrEnum):
    """How the class's virtual CPU is chosen."""

    HOST = "Host"
    HOST_PASSTHROUGH = "HostPassthrough"
    DISCOVERY = "Discovery"
    MODEL = "Model"
    FEATURES = "Features"


class CpuDiscovery(ApiModel):
    """The nodes whose common CPU features a Discovery class takes."""

    node_selector: NodeLabelSelector | None = no_effect(
        "the one host is the only node, so its CPU is the one discovered",
        "The nodes whose CPUs are intersected (all when empty).",
        default=None,
        alias="nodeSelector",
    )


class ClassCpu(ApiModel):
    """The virtual CPU of the class's VMs; fixed once the class exists."""

    type: CpuType = Field(
        description="Host (the host's CPU model), HostPassthrough (the host's CPU as it is), "
        "Discovery (the features common to the chosen nodes), Model (a named CPU model), "
        "Features (a baseline model with the listed features); required."
    )
    model: str | None = Field(
        default=None, min_length=1, description="The CPU model, for type Model (e.g. Nehalem)."
    )
    features: list[str] | None = Field(
        default=None, min_length=1, description="The CPU features required, for type Features."
    )
    discovery: CpuDiscovery | None = Field(
        default=None, description="How Discovery chooses its nodes, for type Discovery."
    )

    @model_validator(mode="after")
    def _fits_its_type(self) -> ClassCpu:
        given = {
            "model": self.model is not None,
            "features": self.features is not None,
            "discovery": self.discovery is not None,
        }
        allowed = {
            CpuType.HOST: set(),
            CpuType.HOST_PASSTHROUGH: set(),
            CpuType.DISCOVERY: {"discovery"},
            CpuType.MODEL: {"model"},
            CpuType.FEATURES: {"features"},
        }[self.type]
        needed = allowed - {"discovery"}
        extra = sorted(name for name, set_ in given.items() if set_ and name not in allowed)
        missing = sorted(name for name in needed if not given[name])
        if missing:
            raise invalid(f"{self.type} requires {' and '.join(missing)}")
        if extra:
            raise invalid(f"{self.type} cannot have {' or '.join(extra)}")
        return self


class CoreRange(ApiModel):
    """The core counts a sizing policy covers."""

    min: int = Field(ge=1, description="The fewest cores; required.")
    max: int = Field(le=1024, description="The most cores; required.")
    step: int | None = Field(default=None, ge=1, description="The core count's step, if any.")

    @model_validator(mode="after")
    def _ordered(self) -> CoreRange:
        if self.max <= self.min:
            raise invalid("The maximum must be greater than the minimum")
        if self.step is not None and self.max <= self.step:
            raise invalid("The maximum must be greater than the step")
        return self

    def grid(self) -> list[int]:
        """The core counts the step allows, from min to max (max always)."""
        if not self.step:
            return list(range(self.min, self.max + 1))
        return [*range(self.min, self.max, self.step), self.max]


class MemoryPerCore(ApiModel):
    """Memory allowed for each core."""

    min: Quantity | None = Field(
        default=None, description="The least memory per core, a quantity (512Mi, 1Gi)."
    )
    max: Quantity | None = Field(
        default=None, description="The most memory per core, a quantity (512Mi, 1Gi)."
    )


class SizingMemory(ApiModel):
    """Memory allowed, in all and per core."""

    min: Quantity | None = Field(
        default=None,
        description="The least memory, a quantity of bytes with a suffix Mi, Gi (powers of "
        "1024) or M, G (powers of 1000), such as 1Gi. Default: no least.",
    )
    max: Quantity | None = Field(
        default=None, description="The most memory, a quantity (8Gi). Default: no most."
    )
    step: Quantity | None = Field(
        default=None,
        description="The memory's step from min, a quantity (512Mi), checked when max is set. "
        "Default: any size.",
    )
    per_core: MemoryPerCore | None = Field(
        default=None, alias="perCore", description="Memory allowed per core."
    )


Fraction = Annotated[int, Field(ge=1, le=100)]
DefaultFraction = Annotated[
    Fraction | Literal["Auto"],
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "maxLength": 4,
            "x-kubernetes-int-or-string": True,
        }
    ),
]
"""A percent from 1 to 100, or Auto."""


class SizingPolicy(ApiModel):
    """What a VM whose cores fall in `cores` may ask for."""

    cores: CoreRange = Field(description="The core range the policy covers; required.")
    memory: SizingMemory | None = Field(default=None, description="Memory allowed.")
    core_fractions: list[Fraction] | None = Field(
        default=None,
        alias="coreFractions",
        description="The core fractions (percent, 1 to 100) allowed; any when unset.",
    )
    dedicated_cores: list[bool] | None = no_effect(
        "a VirtualMachine asks for no dedicated cores in this API version",
        "Whether dedicated cores are allowed.",
        default=None,
        alias="dedicatedCores",
    )
    default_core_fraction: DefaultFraction | None = Field(
        default=None,
        alias="defaultCoreFraction",
        description="The core fraction of a VM that gives none: a percent from 1 to 100, or "
        "Auto; 100 when unset. Auto hands the fraction to Deckhouse's autoscaler, which a "
        "plain host has not: such a VM gets 100%.",
    )

    def fraction_allowed(self, percent: int) -> bool:
        """Whether a VM may ask for `percent` of each core."""
        return not self.core_fractions or percent in self.core_fractions


class VirtualMachineClassSpec(ApiModel):
    """The class: its CPU, its nodes, its sizing policies."""

    cpu: ClassCpu = Field(description="The virtual CPU; required, fixed once created.")
    node_selector: NodeLabelSelector | None = Field(
        default=None,
        alias="nodeSelector",
        description="The nodes the class's VMs may run on: a VM of a class whose selector this "
        "host's node does not meet stays Pending.",
    )
    tolerations: list[Toleration] = no_effect(
        NO_TAINTS, "Taints the class's VMs tolerate.", default_factory=list
    )
    sizing_policies: list[SizingPolicy] = Field(
        default_factory=list,
        alias="sizingPolicies",
        max_length=16,
        description="Allowed cores, memory and core fractions, by core range (ranges may not "
        "overlap); a VM's cores must fall in one range when there are any.",
    )

    @model_validator(mode="after")
    def _ranges_apart(self) -> VirtualMachineClassSpec:
        ranges = sorted((p.cores.min, p.cores.max) for p in self.sizing_policies)
        for (low, high), (next_low, next_high) in pairwise(ranges):
            if next_low <= high:
                raise invalid(
                    f"the sizing policies' core ranges {low}-{high} and {next_low}-{next_high} "
                    "overlap"
                )
        return self

    def policy_for(self, cores: int) -> SizingPolicy | None:
        """The sizing policy whose core range holds `cores`."""
        return next((p for p in self.sizing_policies if p.cores.min <= cores <= p.cores.max), None)


class ClassPhase(StrEnum):
    """Where a class is in its life, as Deckhouse names it."""

    PENDING = "Pending"
    READY = "Ready"
    TERMINATING = "Terminating"


class CpuFeatures(ApiModel):
    """The CPU features of the class's model."""

    enabled: list[str] = Field(default_factory=list, description="Features the VMs get.")
    not_enabled_common: list[str] = Field(
        default_factory=list,
        alias="notEnabledCommon",
        description="Features the nodes have but the model leaves out.",
    )


class VirtualMachineClassStatus(Status):
    """What was observed of the class."""

    phase: ClassPhase | None = Field(
        default=None,
        description="Ready once the class is made, as Deckhouse's classes are (Pending before "
        "that); Terminating while it is deleted and a VirtualMachine is still of it.",
    )
    available_nodes: list[str] = Field(
        default_factory=list,
        alias="availableNodes",
        description="The nodes the class's VMs can run on: this host's, when its selectors "
        "select it.",
    )
    cpu_features: CpuFeatures | None = Field(
        default=None, alias="cpuFeatures", description="The CPU features of the model."
    )
    max_allocatable_resources: dict[str, Quantity] = Field(
        default_factory=dict,
        alias="maxAllocatableResources",
        description="The most CPU and memory a VM of the class could get on a node.",
    )


class VirtualMachineClass(Resource):
    """A class of VMs: their CPU, nodes and sizes.

    The class `generic`, as Deckhouse installs it, is made at each daemon start when missing. A VM
    names its class in spec.virtualMachineClassName; without one, the class annotated
    virtualmachineclass.diskferry.io/is-default-class: "true" serves, and with none the VM runs
    with no class. A VM that does not fit the class's sizing policies stays Pending, its condition
    SizingPolicyMatched False naming the field to change. The class is Terminating while a VM is
    of it.
    """

    CONDITIONS = {
        READY: "True (VirtualMachineClassReady) once the class was looked at: its message says "
        "whether this host's node meets spec.nodeSelector. False while it is Terminating "
        "(InUse: VirtualMachines of the class still exist).",
        **RECONCILED_CONDITION,
    }

    api_version: ApiVersion = API_VERSION
    kind: Literal["VirtualMachineClass"] = "VirtualMachineClass"
    spec: VirtualMachineClassSpec
    status: VirtualMachineClassStatus = Field(default_factory=VirtualMachineClassStatus)

    @property
    def is_default(self) -> bool:
        """Whether the class serves the VMs that name none."""
        return self.metadata.annotations.get(DEFAULT_CLASS_ANNOTATION) == "true"


VIRTUAL_MACHINE_CLASSES = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="VirtualMachineClass",
    plural="virtualmachineclasses",
    model=VirtualMachineClass,
    namespaced=False,
    short_names=("vmc", "vmclass"),
    categories=("diskferry",),
    columns=(
        Column("Phase", ".status.phase"),
        Column(
            "IsDefault",
            ".metadata.annotations.virtualmachineclass\\.diskferry\\.io\\/is-default-class",
        ),
        AGE,
    ),
)
