"""A worker's /progress as the status fields Deckhouse writes: `progress` and `downloadSpeed`."""

from __future__ import annotations

from typing import Any

_UNITS = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def percent_text(percent: float) -> str:
    """ "0%", "NN.N%" or "100%"."""
    if percent <= 0:
        return "0%"
    if percent >= 100:
        return "100%"
    return f"{min(percent, 99.9):.1f}%"


def speed_text(bytes_per_second: float) -> str:
    """A speed as Deckhouse writes it, in binary units: "512/s", "1.5Mi/s", "12Mi/s"."""
    value = float(max(bytes_per_second, 0))
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    number = f"{value:.1f}" if unit and value < 10 else f"{value:.0f}"
    return f"{number}{_UNITS[unit]}/s"


def progress_fields(progress: dict[str, Any]) -> dict[str, Any]:
    """The status fields a /progress document gives."""
    average = round(progress.get("averageSpeed") or 0)
    current = round(progress.get("currentSpeed") or 0)
    return {
        "progress": percent_text(float(progress.get("percent") or 0)),
        "downloadSpeed": {
            "avg": speed_text(average),
            "avgBytes": str(average),
            "current": speed_text(current),
            "currentBytes": str(current),
        },
    }


def unchanged(status: dict[str, Any], fields: dict[str, Any]) -> bool:
    """Whether `status` holds every one of `fields` already (so nothing need be written)."""
    return all(status.get(key) == value for key, value in fields.items())
