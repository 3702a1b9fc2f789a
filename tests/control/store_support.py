"""A test kind with spec and status beside the registry's kinds, and a service over a temp file."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.clock import ManualClock
from diskferry.control.resources.kinds import KindInfo, Registry
from diskferry.control.resources.model import (
    API_VERSION,
    RECONCILED_CONDITION,
    ApiModel,
    Resource,
    Status,
)
from diskferry.control.resources.noeffect import no_effect
from diskferry.control.resources.registry import REGISTRY

NOT_PAINTED = "widgets are not painted here"
COMPLETE = "Complete"


class WidgetSpec(ApiModel):
    """What a widget is asked to be."""

    size: int = 1
    color: str | None = no_effect(NOT_PAINTED, "The widget's color.", default=None)
    parts: list[str] = Field(default_factory=list)


class WidgetStatus(Status):
    """What a widget was seen to be."""

    progress: str | None = None


class Widget(Resource):
    """A namespaced custom kind with spec and status."""

    CONDITIONS = {COMPLETE: "True once the widget is made.", **RECONCILED_CONDITION}
    api_version: Literal["diskferry.io/v1alpha1"] = Field(default=API_VERSION, alias="apiVersion")
    kind: Literal["Widget"] = "Widget"
    spec: WidgetSpec = Field(default_factory=WidgetSpec)
    status: WidgetStatus = Field(default_factory=WidgetStatus)


WIDGETS = KindInfo(
    group="diskferry.io",
    version="v1alpha1",
    kind="Widget",
    plural="widgets",
    model=Widget,
    field_selectors=("spec.size", "spec.color", "status.phase"),
)


def registry_with_widgets() -> Registry:
    """The registry's kinds plus Widget."""
    return Registry([*REGISTRY.kinds, WIDGETS])


def make_service(path: Path, *, keep_changes: int = 10_000) -> ObjectService:
    """An ObjectService over `path`/state.db with a manual clock."""
    return ObjectService(
        path / "state.db", registry_with_widgets(), ManualClock(), keep_changes=keep_changes
    )


def widget(name: str, size: int = 1, **meta: object) -> dict:
    """A Widget body named `name`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Widget",
        "metadata": {"name": name, **meta},
        "spec": {"size": size},
    }
