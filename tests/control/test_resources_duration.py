"""Durations read and written as Go's time.Duration, as Kubernetes' Duration fields hold them."""

from datetime import timedelta

import pytest

from diskferry.control.resources.duration import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2h", timedelta(hours=2)),
        ("1h30m", timedelta(minutes=90)),
        ("2h0m0s", timedelta(hours=2)),
        ("90s", timedelta(seconds=90)),
        ("1.5s", timedelta(seconds=1.5)),
        ("300ms", timedelta(milliseconds=300)),
        ("1.5h", timedelta(minutes=90)),
        ("0", timedelta()),
    ],
)
def test_parse(text: str, value: timedelta) -> None:
    assert parse_duration(text) == value


@pytest.mark.parametrize("text", ["", "2", "2 hours", "-1h", "1d", "h", "1h 30m"])
def test_bad_refused(text: str) -> None:
    with pytest.raises(DurationError, match="is not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(hours=2), "2h0m0s"),
        (timedelta(minutes=90, seconds=30), "1h30m30s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(seconds=30), "30s"),
        (timedelta(seconds=1.25), "1.25s"),
        (timedelta(milliseconds=300), "300ms"),
        (timedelta(), "0s"),
    ],
)
def test_format_as_go(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value
