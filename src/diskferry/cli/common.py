"""What every command shares: error and note lines, the engines' reporter, JSON output,
size options, jobs built from flags, the progress bar."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from diskferry.disk import Progress, SizeError, parse_size
from diskferry.worker import EventType, Reporter

if TYPE_CHECKING:
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")


def fail_line(message: str) -> None:
    """Print the one error line on stderr."""
    first = " ".join(str(message).split("\n")[0].split()) or "failed"
    print(f"diskferry: error: {first}", file=sys.stderr)


def note(message: str) -> None:
    """Tell the user something on stderr (so stdout stays clean for --json)."""
    print(f"diskferry: {message}", file=sys.stderr)


class NoteReporter(Reporter):
    """An engine's notes and events, printed as the CLI's notes on stderr."""

    def event(self, type: EventType, reason: str, message: str) -> None:
        """Print the event's message as a note."""
        note(message)


NOTES = NoteReporter()


def build_job(model: type[M], **fields: Any) -> M:
    """The job `model` of a command's flags; a value the model refuses is a usage error."""
    from pydantic import ValidationError

    try:
        return model(**fields)
    except ValidationError as e:
        first = e.errors(include_url=False, include_input=False)[0]
        raise typer.BadParameter(first["msg"]) from None


def print_json(obj: Any) -> None:
    """Print one JSON object on stdout."""
    print(json.dumps(obj, sort_keys=True))


def size_option(value: str | None) -> int | None:
    """Turn a --size value into bytes, or a usage error."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except SizeError as e:
        raise typer.BadParameter(str(e), param_hint="--size") from e


def parse_headers(values: list[str] | None) -> dict[str, str]:
    """Turn repeated --header 'Name: value' options into a dict, or a usage error."""
    headers: dict[str, str] = {}
    for raw in values or []:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise typer.BadParameter(f"header {raw!r} is not 'Name: value'")
        headers[name.strip()] = value.strip()
    return headers


def bar_label(label: str, phase: str) -> str:
    """The bar's label: `label`, with the phase after it when it names another step
    (`import: converting`, never `import Importing`)."""
    step = re.sub(r"(?<!^)(?=[A-Z])", " ", phase).lower()
    if not step or step.startswith(label.split()[0].lower()[:4]):
        return label
    return f"{label}: {step}"


@contextlib.contextmanager
def progress_bar(progress: Progress, label: str, enabled: bool) -> Iterator[None]:
    """Draw `progress` with rich on a terminal while the block runs, in 80 columns."""
    if not enabled or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as RichProgress

    from diskferry.disk import format_size

    stop = threading.Event()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(bar_width=20),
        TaskProgressColumn(),
        DownloadColumn(binary_units=True),
        TextColumn("{task.fields[speed]}"),
        TimeRemainingColumn(),
    )
    with RichProgress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(label, total=progress.total or None, speed="")

        def refresh() -> None:
            bar.update(
                task,
                completed=progress.done,
                total=progress.total or None,
                speed=f"{format_size(progress.current_speed)}/s",
                description=bar_label(label, progress.phase),
            )

        def loop() -> None:
            while not stop.wait(0.2):
                refresh()

        drawer = threading.Thread(target=loop, daemon=True)
        drawer.start()
        try:
            yield
        finally:
            stop.set()
            drawer.join()
            refresh()
