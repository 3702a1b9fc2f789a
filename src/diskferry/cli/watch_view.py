"""The live view of `get -w`: a row per object with its phase, and a progress bar with the
download speed for each one in progress; a line per change when stdout is not a terminal."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import yaml
from rich.console import Console, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table

from diskferry.cli.daemon_client import DaemonClient, ResourceType
from diskferry.cli.resource_view import age_of, print_table

Key = tuple[str, str]


def progress_text(obj: dict[str, Any]) -> str:
    """`status.progress` as a cell: a disk's "45.2%" as written, a DataUpload's or
    DataDownload's bytes as a percent, a Backup's or Restore's items as done/total."""
    progress = obj.get("status", {}).get("progress") or ""
    if not isinstance(progress, dict):
        return str(progress)
    if progress.get("totalBytes"):
        return f"{round(100 * progress.get('bytesDone', 0) / progress['totalBytes'], 1):g}%"
    if progress.get("totalItems") is not None:
        done = progress.get("itemsBackedUp", progress.get("itemsRestored", 0))
        return f"{done}/{progress['totalItems']}"
    return ""


def progress_of(obj: dict[str, Any]) -> float | None:
    """`status.progress` as a percent, None when the object has none."""
    text = progress_text(obj).strip().rstrip("%")
    try:
        return float(text)
    except ValueError:
        return None


def speed_of(obj: dict[str, Any]) -> str:
    """The current download speed, else the average, as the status writes it."""
    speed = obj.get("status", {}).get("downloadSpeed") or {}
    return str(speed.get("current") or speed.get("avg") or "")


def _cells(obj: dict[str, Any], namespaces: bool) -> list[str]:
    meta = obj.get("metadata", {})
    progress = progress_text(obj)
    cells = [meta.get("name", ""), obj.get("status", {}).get("phase") or "", progress]
    cells.append(speed_of(obj) if progress_of(obj) not in (None, 100.0) else "")
    return [meta.get("namespace", ""), *cells] if namespaces else cells


class WatchView:
    """The objects being watched, drawn live on a terminal or printed as lines of changes."""

    def __init__(self, namespaces: bool, live: bool) -> None:
        self.namespaces = namespaces
        self.objects: dict[Key, dict[str, Any]] = {}
        self.printed: dict[Key, list[str]] = {}
        self.headers = ["NAME", "PHASE", "PROGRESS", "SPEED"]
        if namespaces:
            self.headers.insert(0, "NAMESPACE")
        self.live = (
            Live(get_renderable=self.render, console=Console(), refresh_per_second=2)
            if live
            else None
        )

    @staticmethod
    def key(obj: dict[str, Any]) -> Key:
        """The object's namespace and name."""
        meta = obj.get("metadata", {})
        return meta.get("namespace", ""), meta.get("name", "")

    def render(self) -> RenderableType:
        """The table of every object; a bar for each one in progress."""
        table = Table(box=None, pad_edge=False, padding=(0, 3, 0, 0))
        for header in [*self.headers[:-2], "PROGRESS", "", "SPEED", "AGE"]:
            table.add_column(header, no_wrap=True, header_style="bold")
        for _, obj in sorted(self.objects.items()):
            cells = _cells(obj, self.namespaces)
            done = progress_of(obj)
            bar: RenderableType = ""
            if done is not None and done < 100:
                bar = ProgressBar(total=100, completed=done, width=30)
            table.add_row(*cells[:-2], bar, cells[-2], cells[-1], age_of(obj))
        return table

    def start(self, objects: list[dict[str, Any]]) -> None:
        """Show the objects listed before the watch starts."""
        self.objects = {self.key(o): o for o in objects}
        if self.live is not None:
            self.live.start(refresh=True)
            return
        rows = [_cells(o, self.namespaces) for _, o in sorted(self.objects.items())]
        self.printed = {k: _cells(o, self.namespaces) for k, o in self.objects.items()}
        print_table(self.headers, rows or [])
        sys.stdout.flush()

    def change(self, type_: str, obj: dict[str, Any]) -> None:
        """Take one watch event in."""
        key = self.key(obj)
        if type_ == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        if self.live is not None:
            self.live.refresh()
            return
        cells = _cells(obj, self.namespaces)
        if type_ == "DELETED":
            cells[len(cells) - 3] = "Deleted"
        if self.printed.get(key) != cells:
            self.printed[key] = cells
            print("   ".join(cells).rstrip(), flush=True)

    def stop(self) -> None:
        """Leave the last frame on the terminal."""
        if self.live is not None:
            self.live.stop()


def _printer(output: str) -> Callable[[dict[str, Any]], None]:
    if output == "json":
        return lambda obj: print(json.dumps(obj, indent=4), flush=True)
    return lambda obj: print("---\n" + yaml.safe_dump(obj, sort_keys=False), end="", flush=True)


def watch(
    client: DaemonClient,
    info: ResourceType,
    namespace: str | None,
    name: str | None,
    output: str,
) -> None:
    """Follow the kind's watch in `namespace` (None: all), or one object, until interrupted."""

    def listed() -> tuple[list[dict[str, Any]], str]:
        answer = client.request("GET", info.path(namespace))
        items = [o for o in answer.get("items", []) if name in (None, o["metadata"]["name"])]
        return items, answer.get("metadata", {}).get("resourceVersion", "")

    items, version = listed()
    if output in ("json", "yaml"):
        show = _printer(output)
        for obj in items:
            show(obj)
        for event in client.follow(info.path(namespace), version, lambda: listed()[1]):
            obj = event.get("object")
            if obj is not None and name in (None, obj["metadata"]["name"]):
                show(obj)
        return
    view = WatchView(namespaces=namespace is None and info.namespaced, live=sys.stdout.isatty())

    def relist() -> str:
        fresh, fresh_version = listed()
        view.start(fresh)
        return fresh_version

    view.start(items)
    try:
        for event in client.follow(info.path(namespace), version, relist):
            obj = event.get("object")
            if obj is not None and name in (None, obj["metadata"]["name"]):
                view.change(event["type"], obj)
    finally:
        view.stop()
