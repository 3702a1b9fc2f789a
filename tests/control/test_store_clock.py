"""Timestamps as Kubernetes writes them, from an injectable clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from diskferry.control.clock import Clock, ManualClock, rfc3339


def test_rfc3339_is_utc_to_the_second() -> None:
    local = datetime(2026, 3, 4, 7, 8, 9, 999_999, tzinfo=timezone(timedelta(hours=2)))
    assert rfc3339(local) == "2026-03-04T05:08:09Z"


def test_manual_clock_moves_when_told() -> None:
    clock = ManualClock(datetime(2026, 5, 6, tzinfo=UTC))
    assert clock.stamp() == "2026-05-06T00:00:00Z"
    clock.advance(61.5)
    assert clock.stamp() == "2026-05-06T00:01:01Z"


def test_system_clock_is_utc() -> None:
    assert Clock().now().utcoffset() == timedelta(0)
    assert Clock().stamp().endswith("Z")
