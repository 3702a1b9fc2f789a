"""`diskferry operator`'s options as its instance is told them: the resync period, a duration
above zero, an hour when none is given; the servers' certificates' lifetime, a day unless
given."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from diskferry.cli.main import app
from diskferry.kube import api, config, operator
from diskferry.kube.operator import RESYNC_SECONDS, OperatorSettings


class Told:
    """An operator that keeps the settings it was given and returns at once, holding."""

    settings: list[OperatorSettings] = []

    def __init__(self, api: Any, settings: OperatorSettings) -> None:
        self.settings.append(settings)

    def run(self, stop: threading.Event) -> bool:
        return True


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch) -> list[OperatorSettings]:
    """The settings each operator the CLI starts is given; no cluster is reached."""
    monkeypatch.setattr(config, "api_client", lambda kubeconfig: None)
    monkeypatch.setattr(api, "KubeApi", lambda client, **kwargs: None)
    monkeypatch.setattr(operator, "Operator", Told)
    Told.settings = []
    return Told.settings


def _operator(tmp_path: Path, *options: str) -> int:
    command = ["operator", "--runner", "local", "--data-dir", str(tmp_path / "data"), *options]
    return CliRunner().invoke(app, command, prog_name="diskferry").exit_code


def test_the_resync_period_is_an_hour_unless_given(told, tmp_path: Path) -> None:
    assert _operator(tmp_path) == 0
    assert _operator(tmp_path, "--resync-period", "1h30m") == 0
    assert [s.resync for s in told] == [RESYNC_SECONDS, 5400.0]


@pytest.mark.parametrize(
    ("period", "why"),
    [("0s", "give a duration above zero"), ("soon", "cannot read duration 'soon'")],
)
def test_a_resync_period_that_is_no_duration_above_zero_is_refused(
    diskferry, tmp_path: Path, period: str, why: str
) -> None:
    refused = diskferry("operator", "--data-dir", tmp_path / "data", "--resync-period", period)
    assert refused.code == 2
    assert refused.error.startswith(f"Invalid value for --resync-period: {why}")
    assert not (tmp_path / "data").exists()


def test_the_servers_certificates_last_a_day_unless_given(told, tmp_path: Path, diskferry) -> None:
    assert _operator(tmp_path) == 0
    assert _operator(tmp_path, "--server-cert-lifetime", "90s") == 0
    assert [s.cert_lifetime for s in told] == [timedelta(hours=24), timedelta(seconds=90)]
    refused = diskferry("operator", "--data-dir", tmp_path / "no", "--server-cert-lifetime", "0")
    assert refused.code == 2
    assert refused.error.startswith("Invalid value for --server-cert-lifetime: give a duration")
