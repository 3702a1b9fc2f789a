"""The data movers' configuration as the reconcilers read it: the `default` DataMoverConfig."""

from __future__ import annotations

from diskferry.control.resources.datamoverconfig import (
    DEFAULT_NAME,
    DataMoverConfig,
    DataMoverConfigSpec,
)
from diskferry.control.runtime.client import Client


def load_config(client: Client) -> DataMoverConfigSpec:
    """The spec of the `default` DataMoverConfig; every default when there is none."""
    found = client.get(DataMoverConfig, None, DEFAULT_NAME)
    return DataMoverConfigSpec() if found is None else found.spec
