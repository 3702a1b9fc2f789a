"""The options and helpers every `... serve` command shares: TLS, where to listen, durations."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from diskferry.cli.common import NoteReporter

_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?")


def parse_duration(text: str) -> float:
    """Seconds in '2h', '90m', '1h30m', '45s' or '45'."""
    match = _DURATION.fullmatch(text.strip())
    if not text.strip() or match is None:
        raise typer.BadParameter(f"cannot read duration {text!r}: use e.g. 2h, 30m, 45s")
    h, m, s = (float(g) if g else 0.0 for g in match.groups())
    return h * 3600 + m * 60 + s


def positive_duration(text: str, option: str) -> float:
    """Seconds in a duration (see parse_duration) above zero; a usage error of `option` else."""
    try:
        seconds = parse_duration(text)
    except typer.BadParameter as error:
        raise typer.BadParameter(error.message, param_hint=option) from None
    if seconds <= 0:
        raise typer.BadParameter("give a duration above zero", param_hint=option)
    return seconds


def serve_logging() -> None:
    """Log to stderr with times, as servers do."""
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )


class ServingReporter(NoteReporter):
    """The CLI's notes, and the port a server listens on alone on a stdout line."""

    def details(self, **facts: Any) -> None:
        """Print the listening port once it is known."""
        if "listenPort" in facts:
            print(facts["listenPort"], flush=True)


CertDir = Annotated[Path, typer.Option("--cert-dir", help="tls.crt/tls.key, or a CA to issue.")]
Sans = Annotated[list[str] | None, typer.Option("--san", help="Certificate name, repeatable.")]
Address = Annotated[
    str, typer.Option("--address", help="Address to listen on; 0.0.0.0 for every interface.")
]
Port = Annotated[int, typer.Option("--port", help="Port; 0 picks a free one and prints it.")]
TlsSettingsFile = Annotated[Path | None, typer.Option("--tls-settings", help="TLS settings YAML.")]
HeaderTimeout = Annotated[str, typer.Option("--header-timeout", help="Limit for request headers.")]
IdleTimeout = Annotated[str, typer.Option("--idle-timeout", help="Idle keep-alive limit.")]
Grace = Annotated[str, typer.Option("--grace", help="How long transfers may finish at the end.")]


def path_text(path: Path | None) -> str | None:
    """The path as a job field takes it."""
    return None if path is None else str(path)


def listening(
    cert_dir: Path, sans: list[str] | None, address: str, port: int, tls_settings: Path | None
) -> dict[str, Any]:
    """The `Listening` fields of the options."""
    return {
        "cert_dir": str(cert_dir),
        "sans": sans or [],
        "listen_address": address,
        "listen_port": port,
        "tls_settings": path_text(tls_settings),
    }


def timing_fields(header: str, idle: str, grace: str) -> dict[str, float]:
    """The timeouts and grace of the options, in seconds."""
    return {
        "header_timeout": parse_duration(header),
        "idle_timeout": parse_duration(idle),
        "grace": parse_duration(grace),
    }
