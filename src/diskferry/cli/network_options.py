"""The options every networked command takes (--retries, --timeout), and its retries said."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from diskferry.cli.server_options import positive_duration

Retries = Annotated[
    int,
    typer.Option(
        "--retries",
        min=0,
        help="Times to retry after a network fault, waiting 0.5 s, 1 s, 2 s... between.",
    ),
]
Timeout = Annotated[
    str,
    typer.Option(
        "--timeout",
        metavar="DURATION",
        help="How long to wait for a connection or an answer: 30s, 2m.",
    ),
]


def timeout_seconds(value: str) -> float:
    """A --timeout value in seconds, or a usage error."""
    return positive_duration(value, "--timeout")


def say_retries() -> None:
    """Print each retry and resume on stderr as a `diskferry:` note."""
    retry_log = logging.getLogger("diskferry.retry")  # diskferry.base.retry's, by its name
    if retry_log.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("diskferry: %(message)s"))
    retry_log.addHandler(handler)
    retry_log.setLevel(logging.INFO)
    retry_log.propagate = False
