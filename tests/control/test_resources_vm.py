"""The VirtualMachine and DataMoverConfig models: the least a manifest needs, the defaults,
the refusals, and the CBT label selectors as KubeVirt reads them."""

from __future__ import annotations

from typing import Any

import pytest

from diskferry.control.apiserver.validation import validate
from diskferry.control.errors import InvalidError
from diskferry.control.reconcilers.datamover.moverconfig import load_config
from diskferry.control.resources.datamoverconfig import (
    ChangedBlockTrackingLabelSelectors,
    DataMoverConfig,
    DataMoverConfigSpec,
)
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualmachine import VirtualMachine


def vm(**spec: Any) -> dict[str, Any]:
    """A VirtualMachine manifest with `spec`."""
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": spec,
    }


def dmc(name: str = "default", **spec: Any) -> dict[str, Any]:
    """A DataMoverConfig manifest with `spec`."""
    return {
        "apiVersion": "diskferry.io/v1alpha1",
        "kind": "DataMoverConfig",
        "metadata": {"name": name},
        "spec": spec,
    }


def refusal(data: dict[str, Any]) -> str:
    """The message `data` is refused with."""
    with pytest.raises(InvalidError) as caught:
        validate(REGISTRY.by_kind(data["kind"]), data)
    return caught.value.message


def test_a_vm_needs_only_block_devices() -> None:
    obj, _ = validate(
        REGISTRY.lookup("vm"), vm(blockDeviceRefs=[{"kind": "VirtualDisk", "name": "d"}])
    )
    assert isinstance(obj, VirtualMachine)
    assert obj.spec.cpu.cores == 1
    assert obj.spec.memory.size_bytes == 256 << 20
    assert obj.spec.enable_guest_agent is True and obj.spec.qmp_socket is None
    assert REGISTRY.lookup("virtualmachines") is REGISTRY.lookup("vm")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"blockDeviceRefs": []}, "spec.blockDeviceRefs"),
        ({"runPolicy": "AlwaysOn"}, "spec.blockDeviceRefs"),
        ({"runPolicy": "Sometimes", "blockDeviceRefs": []}, "spec.runPolicy"),
        (
            {"runPolicy": "AlwaysOn", "blockDeviceRefs": [{"kind": "Pod", "name": "x"}]},
            "spec.blockDeviceRefs[0].kind",
        ),
        ({"runPolicy": "AlwaysOn", "blockDeviceRefs": [], "cpu": {"cores": 0}}, "spec.cpu.cores"),
        ({"runPolicy": "AlwaysOn", "blockDeviceRefs": [], "qmpSocket": "rel"}, "spec.qmpSocket"),
    ],
)
def test_bad_vms_are_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    assert field in refusal(vm(**spec))


def test_the_data_mover_defaults() -> None:
    spec = DataMoverConfigSpec()
    assert spec.max_concurrent_data_movers == 3
    assert spec.max_incremental_backups == 0
    assert spec.stale_data_upload_threshold == "2h"
    assert spec.operation_timeout == "4h"
    assert spec.worker_log_lines == 200
    assert spec.bandwidth_limit is None
    assert spec.changed_block_tracking_label_selectors is None


def test_only_the_default_data_mover_config_is_taken() -> None:
    info = REGISTRY.by_kind("DataMoverConfig")
    assert not info.namespaced and info.plural == "datamoverconfigs"
    assert "named 'default'" in refusal(dmc("other"))
    assert "spec.maxConcurrentDataMovers" in refusal(dmc(maxConcurrentDataMovers=0))
    assert "spec.operationTimeout" in refusal(dmc(operationTimeout="soon"))


def test_the_bandwidth_limit_is_a_quantity_a_second_and_not_zero() -> None:
    spec = DataMoverConfig.model_validate(dmc(bandwidthLimit="50Mi")).spec
    assert spec.bandwidth_limit == "50Mi" and spec.bandwidth_bytes == 50 << 20
    assert DataMoverConfigSpec().bandwidth_bytes is None
    assert "at least 1 byte a second" in refusal(dmc(bandwidthLimit="0"))
    assert "spec.bandwidthLimit" in refusal(dmc(bandwidthLimit="fast"))


class OneConfig:
    """A client holding at most one DataMoverConfig."""

    def __init__(self, found: DataMoverConfig | None) -> None:
        self.found = found

    def get(self, model: type, namespace: str | None, name: str) -> DataMoverConfig | None:
        assert (model, namespace, name) == (DataMoverConfig, None, "default")
        return self.found


def test_load_config_gives_the_stored_spec_or_the_defaults() -> None:
    assert load_config(OneConfig(None)) == DataMoverConfigSpec()  # type: ignore[arg-type]
    stored = DataMoverConfig.model_validate(dmc(maxConcurrentDataMovers=2))
    assert load_config(OneConfig(stored)).max_concurrent_data_movers == 2  # type: ignore[arg-type]


WEB = {"matchLabels": {"app": "web"}}


@pytest.mark.parametrize(
    ("selectors", "vm_labels", "namespace_labels", "selected"),
    [
        ({}, {"app": "web"}, {}, False),
        ({"virtualMachineLabelSelector": WEB}, {"app": "web"}, {}, True),
        ({"virtualMachineLabelSelector": WEB}, {"app": "db"}, {}, False),
        ({"virtualMachineLabelSelector": {}}, {}, {}, True),
        (
            {
                "namespaceLabelSelector": {
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["prod"]}]
                }
            },
            {},
            {"tier": "prod"},
            True,
        ),
        (
            {"namespaceLabelSelector": {"matchExpressions": [{"key": "t", "operator": "Exists"}]}},
            {"t": "x"},
            {},
            False,
        ),
        (
            {
                "virtualMachineLabelSelector": {
                    "matchExpressions": [{"key": "cbt", "operator": "DoesNotExist"}]
                }
            },
            {"cbt": "off"},
            {},
            False,
        ),
    ],
)
def test_cbt_selectors_match_vm_or_namespace_labels(
    selectors: dict[str, Any],
    vm_labels: dict[str, str],
    namespace_labels: dict[str, str],
    selected: bool,
) -> None:
    parsed = ChangedBlockTrackingLabelSelectors.model_validate(selectors)
    assert parsed.selects(vm_labels, namespace_labels) is selected


def test_a_malformed_selector_is_refused() -> None:
    bad = {"virtualMachineLabelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}
    assert "needs values" in refusal(dmc(changedBlockTrackingLabelSelectors=bad))
    worse = {"virtualMachineLabelSelector": {"matchLabels": {"bad key!": "x"}}}
    assert "changedBlockTrackingLabelSelectors" in refusal(
        dmc(changedBlockTrackingLabelSelectors=worse)
    )
