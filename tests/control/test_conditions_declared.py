"""A condition is written only of a type its kind declares, and every kind the controllers
reconcile declares the manager's own condition, Reconciled."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from store_support import COMPLETE, WIDGETS, Widget, make_service

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.controllers import Controllers
from diskferry.control.resources.model import IN_USE, READY, RECONCILED, Resource
from diskferry.control.resources.registry import REGISTRY
from diskferry.control.resources.virtualdisk import VirtualDisk
from diskferry.control.runtime.client import EmbeddedClient
from diskferry.control.runtime.conditions import set_condition
from diskferry.control.runtime.manager import Manager
from diskferry.control.runtime.phases import transition
from diskferry.control.runtime.reconciler import Result
from diskferry.control.runtime.source import StoreSource


def _disk() -> VirtualDisk:
    return VirtualDisk.model_validate(
        {
            "apiVersion": "diskferry.io/v1alpha1",
            "kind": "VirtualDisk",
            "metadata": {"name": "d", "namespace": "default", "generation": 1},
            "spec": {"persistentVolumeClaim": {"size": "1Mi"}},
        }
    )


def test_a_declared_type_is_set_and_an_undeclared_one_is_refused() -> None:
    disk = _disk()
    conditions = set_condition(disk, [], IN_USE, True, "AttachedToVirtualMachine", "vm1")
    assert [(c["type"], c["status"]) for c in conditions] == [("InUse", "True")]
    with pytest.raises(ValueError, match="VirtualDisk declares no condition 'Complete'"):
        set_condition(disk, conditions, COMPLETE, True, "Completed")


class _Refusing:
    """A client that fails the test when a write reaches it."""

    def patch_status(self, obj: Resource, status: dict[str, Any]) -> Resource:
        raise AssertionError(f"a status with an undeclared condition was written: {status}")


@pytest.mark.parametrize("removed", [False, True])
def test_a_phase_change_with_an_undeclared_condition_writes_nothing(removed: bool) -> None:
    value = None if removed else (True, "Why", "")
    with pytest.raises(ValueError, match="declares no condition 'AgentReady'"):
        transition(_Refusing(), _disk(), READY, READY, "", conditions={"AgentReady": value})  # type: ignore[arg-type]


class _Plain(Widget):
    """A widget kind that does not declare Reconciled."""

    CONDITIONS = {COMPLETE: "True once the widget is made."}


class _PlainReconciler:
    info = dataclasses.replace(WIDGETS, model=_Plain)

    def reconcile(self, obj: _Plain) -> Result:
        return Result.done()


def test_the_manager_refuses_a_kind_that_does_not_declare_reconciled(tmp_path: Path) -> None:
    objects = make_service(tmp_path)
    try:
        client = EmbeddedClient(objects, objects.registry)
        with pytest.raises(ValueError, match="_Plain declares no condition 'Reconciled'"):
            Manager(StoreSource(objects), client, [_PlainReconciler()])
    finally:
        objects.close()


def test_every_kind_the_controllers_reconcile_declares_reconciled(tmp_path: Path) -> None:
    objects = ObjectService(tmp_path / "state.db", REGISTRY)
    try:
        reconciled = [r.info for r in Controllers(tmp_path, objects).reconcilers]
    finally:
        objects.close()
    assert len(reconciled) >= 15
    for info in reconciled:
        assert RECONCILED in info.model.CONDITIONS, info.kind
        assert all(meaning.strip() for meaning in info.model.CONDITIONS.values()), info.kind
