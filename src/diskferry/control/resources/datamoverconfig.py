"""DataMoverConfig: the one cluster-wide `default` object with the data movers' limits.

`spec.maxConcurrentDataMovers` caps uploads and, apart, downloads; `maxIncrementalBackups`
(0 = unlimited) bounds a chain; `staleDataUploadThreshold` is when an active upload stops
blocking the next of its VM; `operationTimeout` bounds one upload or download;
`workerLogLines` is how much of a worker's log is kept; `bandwidthLimit` caps each mover
(bytes per second, unlimited when unset); `changedBlockTrackingLabelSelectors` turns CBT on
for the VMs it selects, as KubeVirt's field of that name.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from diskferry.control.resources.common import ApiVersion, Duration, Quantity, invalid
from diskferry.control.resources.kinds import AGE, Column, KindInfo
from diskferry.control.resources.labelselector import LabelSelector
from diskferry.control.resources.model import (
    API_VERSION,
    GROUP,
    VERSION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.quantity import parse_quantity

DEFAULT_NAME = "default"


class ChangedBlockTrackingLabelSelectors(ApiModel):
    """The VMs that get CBT: those whose labels, or whose namespace's labels, match."""

    virtual_machine_label_selector: LabelSelector | None = Field(
        default=None,
        alias="virtualMachineLabelSelector",
        description="VMs whose labels match get CBT. Default: none selected this way.",
    )
    namespace_label_selector: LabelSelector | None = Field(
        default=None,
        alias="namespaceLabelSelector",
        description="The VMs in namespaces whose labels match get CBT. Default: none selected "
        "this way.",
    )

    def selects(self, vm_labels: dict[str, str], namespace_labels: dict[str, str]) -> bool:
        """Whether a VM with `vm_labels`, in a namespace with `namespace_labels`, gets CBT."""
        by_vm = self.virtual_machine_label_selector
        by_namespace = self.namespace_label_selector
        return bool(
            (by_vm is not None and by_vm.matches(vm_labels))
            or (by_namespace is not None and by_namespace.matches(namespace_labels))
        )


class DataMoverConfigSpec(ApiModel):
    """The limits every DataUpload and DataDownload runs under."""

    max_concurrent_data_movers: int = Field(
        default=3,
        ge=1,
        alias="maxConcurrentDataMovers",
        description="How many DataUploads, and apart how many DataDownloads, move data at "
        "once (at least 1, default 3); the others wait in Prepared and are admitted oldest "
        "first.",
    )
    max_incremental_backups: int = Field(
        default=0,
        ge=0,
        alias="maxIncrementalBackups",
        description="How many incremental backups may follow a full one in a disk's chain "
        "before the next is full again; 0 (the default) is no limit. The annotation "
        "diskferry.io/max-incremental-backups on a DataUpload or its VM overrides it.",
    )
    stale_data_upload_threshold: Duration = Field(
        default="2h",
        alias="staleDataUploadThreshold",
        description="Only one DataUpload of a VM is active at once, the oldest; one older than "
        "this (a Go duration: 2h, 90m) no longer holds back the VM's next one. Default 2h.",
    )
    operation_timeout: Duration = Field(
        default="4h",
        alias="operationTimeout",
        description="How long a DataUpload or DataDownload may take from its acceptance, as a "
        "Go duration, unless its own spec.operationTimeout says otherwise; then its worker is "
        "stopped and it is Failed. Default 4h.",
    )
    worker_log_lines: int = Field(
        default=200,
        ge=1,
        le=100_000,
        alias="workerLogLines",
        description="How many of the last lines of a mover's worker log go into the daemon's "
        "log when the mover ends, 1 to 100000 (default 200).",
    )
    changed_block_tracking_label_selectors: ChangedBlockTrackingLabelSelectors | None = Field(
        default=None,
        alias="changedBlockTrackingLabelSelectors",
        description="The VMs whose disks get changed-block tracking (CBT), as KubeVirt's field "
        "of that name: by their labels or their namespace's. Default: none, but VMs labelled "
        'diskferry.io/changed-block-tracking: "true".',
    )
    bandwidth_limit: Quantity | None = Field(
        default=None,
        alias="bandwidthLimit",
        description="The most each mover reads or writes a second, a quantity of bytes (50Mi, "
        "100M; at least 1). Default: unlimited.",
    )

    @field_validator("bandwidth_limit")
    @classmethod
    def _some_bandwidth(cls, value: str | None) -> str | None:
        if value is not None and parse_quantity(value) == 0:
            raise invalid("a bandwidth limit must be at least 1 byte a second: unset it for none")
        return value

    @property
    def bandwidth_bytes(self) -> int | None:
        """The limit of each mover in bytes a second, None when unlimited."""
        return None if self.bandwidth_limit is None else parse_quantity(self.bandwidth_limit)


class DataMoverConfig(Resource):
    """The data movers' configuration; only the one named `default` is allowed.

    Cluster-scoped; without one, every default holds. In changedBlockTrackingLabelSelectors an
    empty selector selects everything, a missing one nothing.
    """

    api_version: ApiVersion = API_VERSION
    kind: Literal["DataMoverConfig"] = "DataMoverConfig"
    spec: DataMoverConfigSpec
    status: Status = Field(
        default_factory=Status,
        description="Unused: the configuration takes effect as written, and nothing is "
        "observed of it.",
    )

    @model_validator(mode="after")
    def _named_default(self) -> DataMoverConfig:
        if self.metadata.name not in (None, DEFAULT_NAME):
            raise invalid(f"a DataMoverConfig must be named {DEFAULT_NAME!r}")
        return self


DATA_MOVER_CONFIGS = KindInfo(
    group=GROUP,
    version=VERSION,
    kind="DataMoverConfig",
    plural="datamoverconfigs",
    model=DataMoverConfig,
    namespaced=False,
    categories=("diskferry",),
    columns=(
        Column("MaxConcurrent", ".spec.maxConcurrentDataMovers", "integer"),
        Column("MaxIncrementals", ".spec.maxIncrementalBackups", "integer"),
        Column("BandwidthLimit", ".spec.bandwidthLimit", priority=1),
        AGE,
    ),
)
