"""The data movers' limits from the DataMoverConfig named `default`, with the defaults where it
says nothing (or where there is no such kind or object)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diskferry.control.duration import parse_duration
from diskferry.control.reconcilers.plain import get_plain
from diskferry.control.runtime.client import Client

CONFIG_NAME = "default"


@dataclass(frozen=True)
class MoverConfig:
    """The limits every DataUpload and DataDownload runs under."""

    max_concurrent: int = 3
    max_incrementals: int = 0
    stale_seconds: float = 2 * 3600.0
    timeout_seconds: float = 4 * 3600.0
    log_lines: int = 200


def _seconds(spec: dict[str, Any], key: str, default: float) -> float:
    value = spec.get(key)
    return default if value is None else parse_duration(str(value)).total_seconds()


def load_mover_config(client: Client) -> MoverConfig:
    """The DataMoverConfig `default`'s spec over the defaults."""
    found = get_plain(client, "DataMoverConfig", None, CONFIG_NAME) or {}
    spec = found.get("spec") or {}
    base = MoverConfig()
    return MoverConfig(
        max_concurrent=int(spec.get("maxConcurrentDataMovers") or base.max_concurrent),
        max_incrementals=int(spec.get("maxIncrementalBackups") or 0),
        stale_seconds=_seconds(spec, "staleDataUploadThreshold", base.stale_seconds),
        timeout_seconds=_seconds(spec, "operationTimeout", base.timeout_seconds),
        log_lines=int(spec.get("workerLogLines") or base.log_lines),
    )
