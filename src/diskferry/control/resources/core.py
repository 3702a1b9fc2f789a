"""The core kinds the daemon serves under `/api/v1`: Namespace, Secret and Event."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Literal

from pydantic import Field, field_validator

from diskferry.control.kinds import AGE, Column, KindInfo
from diskferry.control.model import ApiModel, Resource


class NamespaceStatus(ApiModel):
    """A namespace's phase: Active, or Terminating while its objects are deleted."""

    phase: Literal["Active", "Terminating"] = "Active"


class Namespace(Resource):
    """A namespace objects live in."""

    api_version: Literal["v1"] = Field(default="v1", alias="apiVersion")
    kind: Literal["Namespace"] = "Namespace"
    spec: dict[str, list[str]] = Field(default_factory=dict)
    status: NamespaceStatus = Field(default_factory=NamespaceStatus)


class Secret(Resource):
    """Named secret values, base64 in `data`; `stringData` is folded into `data` on write."""

    api_version: Literal["v1"] = Field(default="v1", alias="apiVersion")
    kind: Literal["Secret"] = "Secret"
    type: str = "Opaque"
    data: dict[str, str] = Field(default_factory=dict)
    string_data: dict[str, str] = Field(default_factory=dict, alias="stringData")
    immutable: bool | None = None

    @field_validator("data")
    @classmethod
    def _base64(cls, value: dict[str, str]) -> dict[str, str]:
        for key, encoded in value.items():
            try:
                base64.b64decode(encoded, validate=True)
            except (binascii.Error, ValueError):
                raise ValueError(f"data[{key}]: not base64") from None
        return value

    def folded(self) -> Secret:
        """The secret with `stringData` encoded into `data`, as the API stores it."""
        data = dict(self.data)
        for key, text in self.string_data.items():
            data[key] = base64.b64encode(text.encode()).decode()
        return self.model_copy(update={"data": data, "string_data": {}})

    def value(self, key: str) -> bytes | None:
        """The decoded value of `key`, None when absent."""
        folded = self.folded()
        encoded = folded.data.get(key)
        return None if encoded is None else base64.b64decode(encoded)


class ObjectReference(ApiModel):
    """The object an event is about."""

    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str | None = None
    namespace: str | None = None
    name: str | None = None
    uid: str | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    field_path: str | None = Field(default=None, alias="fieldPath")


class EventSource(ApiModel):
    """Who wrote an event."""

    component: str | None = None
    host: str | None = None


class Event(Resource):
    """Something that happened to an object: a phase change, a failure, a warning."""

    api_version: Literal["v1"] = Field(default="v1", alias="apiVersion")
    kind: Literal["Event"] = "Event"
    involved_object: ObjectReference = Field(alias="involvedObject")
    reason: str = ""
    message: str = ""
    type: Literal["Normal", "Warning"] = "Normal"
    count: int = 1
    first_timestamp: datetime | None = Field(default=None, alias="firstTimestamp")
    last_timestamp: datetime | None = Field(default=None, alias="lastTimestamp")
    event_time: datetime | None = Field(default=None, alias="eventTime")
    source: EventSource = Field(default_factory=EventSource)
    reporting_component: str | None = Field(default=None, alias="reportingComponent")
    reporting_instance: str | None = Field(default=None, alias="reportingInstance")
    action: str | None = None


NAMESPACES = KindInfo(
    group="",
    version="v1",
    kind="Namespace",
    plural="namespaces",
    model=Namespace,
    namespaced=False,
    short_names=("ns",),
    columns=(Column("Status", ".status.phase"), AGE),
)
SECRETS = KindInfo(
    group="",
    version="v1",
    kind="Secret",
    plural="secrets",
    model=Secret,
    has_status=False,
    field_selectors=("type",),
    columns=(Column("Type", ".type"), AGE),
)
EVENTS = KindInfo(
    group="",
    version="v1",
    kind="Event",
    plural="events",
    model=Event,
    short_names=("ev",),
    has_status=False,
    field_selectors=(
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    columns=(
        Column("Last Seen", ".lastTimestamp", "date"),
        Column("Type", ".type"),
        Column("Reason", ".reason"),
        Column("Object", ".involvedObject.name"),
        Column("Message", ".message"),
    ),
)
