"""A worker's /progress as Deckhouse's status fields: percent text and download speeds."""

from __future__ import annotations

import pytest

from diskferry.control.reconcilers.progress import (
    percent_text,
    progress_fields,
    speed_text,
    unchanged,
)


@pytest.mark.parametrize(
    ("percent", "text"),
    [(0, "0%"), (0.04, "0.0%"), (42.55, "42.5%"), (99.99, "99.9%"), (100, "100%"), (120, "100%")],
)
def test_percent_text(percent: float, text: str) -> None:
    assert percent_text(percent) == text


@pytest.mark.parametrize(
    ("speed", "text"),
    [(0, "0/s"), (512, "512/s"), (1536, "1.5Ki/s"), (12 << 20, "12Mi/s"), (5 << 30, "5.0Gi/s")],
)
def test_speed_text(speed: float, text: str) -> None:
    assert speed_text(speed) == text


def test_progress_fields_from_a_progress_document() -> None:
    fields = progress_fields({"percent": 12.34, "averageSpeed": 2 << 20, "currentSpeed": 3000.4})
    assert fields == {
        "progress": "12.3%",
        "downloadSpeed": {
            "avg": "2.0Mi/s",
            "avgBytes": str(2 << 20),
            "current": "2.9Ki/s",
            "currentBytes": "3000",
        },
    }
    assert progress_fields({})["progress"] == "0%"


def test_unchanged_fields_are_not_written_again() -> None:
    status = {"phase": "Provisioning", "progress": "1.0%", "other": 1}
    assert unchanged(status, {"progress": "1.0%"})
    assert not unchanged(status, {"progress": "1.1%"})
    assert not unchanged(status, {"downloadSpeed": {}})
