"""Deckhouse's VirtualMachine and VirtualMachineClass manifests as the API takes them: the guides'
samples apply unchanged, the anchor's defaults and rules hold, and a field that has no effect on
one host is taken with a warning saying why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from store_support import make_service

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.apiserver.validation import validate
from diskferry.control.errors import InvalidError
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualmachine import RunPolicy, VirtualMachine
from diskferry.control.resources.virtualmachineclass import VirtualMachineClass

SAMPLES = Path(__file__).parent.parent / "anchors" / "deckhouse"
VM_SAMPLES = sorted(p.name for p in SAMPLES.glob("*virtualmachine*.yaml") if "class" not in p.name)
DISKS = [{"kind": "VirtualDisk", "name": "d"}]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ObjectService]:
    svc = make_service(tmp_path)
    yield svc
    svc.close()


def sample(name: str) -> dict[str, Any]:
    """The anchor's sample manifest `name`."""
    return yaml.safe_load((SAMPLES / name).read_text())


def vm(**spec: Any) -> dict[str, Any]:
    """A VirtualMachine manifest with `spec`."""
    body = {"apiVersion": "diskferry.io/v1alpha1", "kind": "VirtualMachine", "spec": spec}
    return {**body, "metadata": {"name": "vm1", "namespace": "default"}}


def vmc(**spec: Any) -> dict[str, Any]:
    """A VirtualMachineClass manifest with `spec`."""
    body = {"apiVersion": "diskferry.io/v1alpha1", "kind": "VirtualMachineClass", "spec": spec}
    return {**body, "metadata": {"name": "c1"}}


def refusal(data: dict[str, Any]) -> str:
    """The message `data` is refused with."""
    with pytest.raises(InvalidError) as caught:
        validate(REGISTRY.by_kind(data["kind"]), data)
    return caught.value.message


@pytest.mark.parametrize("name", VM_SAMPLES)
def test_every_guide_vm_applies_unchanged(service: ObjectService, name: str) -> None:
    doc = sample(name)
    stored, warnings = service.create(REGISTRY.by_kind("VirtualMachine"), "default", doc)
    assert warnings == []
    assert stored["spec"]["virtualMachineClassName"] == "generic"
    assert stored["spec"]["blockDeviceRefs"] == doc["spec"]["blockDeviceRefs"]


def test_the_anchors_defaults() -> None:
    obj, _ = validate(REGISTRY.lookup("vm"), vm(blockDeviceRefs=DISKS))
    assert isinstance(obj, VirtualMachine)
    spec = obj.to_json()["spec"]
    assert spec["runPolicy"] == RunPolicy.ALWAYS_ON_UNLESS_STOPPED_MANUALLY
    assert spec["bootloader"] == "BIOS" and spec["osType"] == "Generic"
    assert spec["enableParavirtualization"] is True
    assert spec["terminationGracePeriodSeconds"] == 60
    assert spec["liveMigrationPolicy"] == "PreferSafe"
    assert spec["disruptions"] == {"restartApprovalMode": "Manual"}
    assert spec["networks"] == [{"type": "Main"}]


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"blockDeviceRefs": []}, "spec.blockDeviceRefs"),
        ({"cpu": {"cores": 1, "coreFraction": "0%"}}, "spec.cpu.coreFraction"),
        ({"cpu": {"cores": 1, "coreFraction": "101%"}}, "spec.cpu.coreFraction"),
        ({"provisioning": {"type": "UserData"}}, "type UserData requires userData"),
        (
            {"provisioning": {"type": "UserData", "userData": "x" * 2049}},
            "exceeds 2048 byte limit",
        ),
        (
            {"provisioning": {"type": "SysprepRef", "userData": "#cloud-config"}},
            "type SysprepRef requires sysprepRef",
        ),
        ({"osType": "Legacy", "bootloader": "EFI"}, "The Legacy osType requires the BIOS"),
        (
            {"osType": "Legacy", "provisioning": {"type": "UserData", "userData": "x"}},
            "does not support provisioning",
        ),
        (
            {
                "osType": "Legacy",
                "enableParavirtualization": False,
                "blockDeviceRefs": [{"kind": "VirtualDisk", "name": f"d{i}"} for i in range(5)],
            },
            "at most 4 block devices",
        ),
        ({"networks": [{"type": "Wifi"}]}, "spec.networks[0].type"),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 101, "preference": {}}
                        ]
                    }
                }
            },
            "weight",
        ),
    ],
)
def test_the_anchors_rules(spec: dict[str, Any], said: str) -> None:
    assert said in refusal(vm(**{"blockDeviceRefs": DISKS, **spec}))


def test_cluster_only_fields_are_taken_with_a_warning(service: ObjectService) -> None:
    body = vm(
        blockDeviceRefs=DISKS,
        tolerations=[{"key": "dedicated", "operator": "Exists"}],
        priorityClassName="high",
        liveMigrationPolicy="AlwaysForced",
        nodeSelector={"kubernetes.io/os": "linux"},
    )
    _, warnings = service.create(REGISTRY.by_kind("VirtualMachine"), "default", body)
    fields = sorted(w.split(":", 1)[0] for w in warnings)
    assert fields == ["spec.liveMigrationPolicy", "spec.priorityClassName", "spec.tolerations"]
    assert all("has no effect here" in w for w in warnings)


def test_the_generic_class_sample_applies_and_its_policies_are_read() -> None:
    obj, _ = validate(REGISTRY.lookup("vmclass"), sample("virtualmachineclass-generic.yaml"))
    assert isinstance(obj, VirtualMachineClass)
    assert not REGISTRY.lookup("vmc").namespaced
    spec = obj.spec
    assert spec.cpu.model == "Nehalem"
    policy = spec.policy_for(6)
    assert policy is not None and policy.core_fractions == [20, 50, 100]
    assert spec.policy_for(2000) is None


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"cpu": {"type": "Model"}}, "Model requires model"),
        ({"cpu": {"type": "Host", "model": "Nehalem"}}, "Host cannot have model"),
        ({"cpu": {"type": "Features", "features": []}}, "spec.cpu.features"),
        ({"cpu": {"type": "Discovery", "model": "x"}}, "Discovery cannot have model"),
        (
            {
                "cpu": {"type": "Host"},
                "sizingPolicies": [
                    {"cores": {"min": 1, "max": 4}},
                    {"cores": {"min": 4, "max": 8}},
                ],
            },
            "overlap",
        ),
        ({"cpu": {"type": "Host"}, "sizingPolicies": [{"cores": {"min": 4, "max": 4}}]}, "maximum"),
        (
            {
                "cpu": {"type": "Host"},
                "sizingPolicies": [{"cores": {"min": 1, "max": 2}, "defaultCoreFraction": "Half"}],
            },
            "defaultCoreFraction",
        ),
    ],
)
def test_the_class_rules(spec: dict[str, Any], said: str) -> None:
    assert said in refusal(vmc(**spec))


def test_a_class_cpu_is_fixed_once_made_and_its_policies_may_change(
    service: ObjectService,
) -> None:
    info = REGISTRY.by_kind("VirtualMachineClass")
    made, _ = service.create(info, None, vmc(cpu={"type": "Model", "model": "Nehalem"}))
    made["spec"]["sizingPolicies"] = [{"cores": {"min": 1, "max": 2}}]
    service.update(info, None, "c1", made)
    made = service.get(info, None, "c1")
    made["spec"]["cpu"] = {"type": "Host"}
    with pytest.raises(InvalidError) as caught:
        service.update(info, None, "c1", made)
    assert "spec.cpu" in caught.value.message and "immutable" in caught.value.message
