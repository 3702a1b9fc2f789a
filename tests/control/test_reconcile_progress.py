"""A worker's /progress as Deckhouse's status fields: percent text and download speeds, written
at most once a second per object and only when a shown value changed."""

from __future__ import annotations

import pytest

from diskferry.control.runtime.progress import (
    ProgressWrites,
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


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _look(percent: float, speed: float) -> dict:
    return {"target": "t", **progress_fields({"percent": percent, "averageSpeed": speed})}


def test_progress_is_written_at_most_once_a_second_per_object() -> None:
    clock = Clock()
    writes = ProgressWrites(clock=clock)
    status: dict = {}
    assert writes.fields("a", status, _look(1, 1000)) == _look(1, 1000)
    status = _look(1, 1000)
    clock.now += 0.5
    assert writes.fields("a", status, _look(2, 1000)) == {"target": "t"}  # too soon
    assert writes.fields("b", {}, _look(2, 1000)) == _look(2, 1000)  # another object
    clock.now += 0.5
    assert writes.fields("a", status, _look(3, 1000)) == _look(3, 1000)


def test_progress_is_written_only_when_a_shown_value_changed() -> None:
    clock = Clock()
    writes = ProgressWrites(clock=clock)
    status = _look(1, 5 << 20)
    clock.now += 5
    # the byte counts differ, the text shown does not
    same = _look(1.04, (5 << 20) + 100)
    assert same["downloadSpeed"] != status["downloadSpeed"]
    assert writes.fields("a", status, same) == {"target": "t"}
    assert writes.fields("a", status, _look(1, 6 << 20)) == _look(1, 6 << 20)  # the speed
