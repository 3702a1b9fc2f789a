"""What each anchor sample gets from admission today: a dry-run create, as kubectl sends it.

Run from the repository root: `.venv/bin/python tests/anchors/admit.py` prints one markdown table
row per sample under tests/anchors/<anchor>/. Each sample goes through ObjectService.create with
dry_run and fieldValidation Strict (what `kubectl apply` sends), in a scratch state file, after its
namespace is made: the row says "accepted" or gives the refusal as the API words it. A sample
refused for unknown fields is tried again with fieldValidation Ignore, to show what else stands in
its way. A kind the daemon does not serve is refused as kubectl refuses it, before any request.
For a Schedule, the row also gives what the Schedule reconciler makes of spec.schedule.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from diskferry.control.apiserver.objects import ObjectService
from diskferry.control.errors import ApiError
from diskferry.control.reconcilers.velero.schedule import cron_error
from diskferry.control.resources.core import NAMESPACES
from diskferry.control.resources.registry import REGISTRY

HERE = Path(__file__).resolve().parent
ANCHORS = ("deckhouse", "kubevirt", "velero")


def _kind_info(doc: dict[str, Any]) -> Any:
    api_version = str(doc.get("apiVersion", ""))
    group = api_version.rpartition("/")[0] if "/" in api_version else ""
    kind = str(doc.get("kind", ""))
    try:
        return REGISTRY.by_kind(kind, group)
    except ApiError:
        return None


def _ensure_namespace(service: ObjectService, name: str) -> None:
    try:
        service.get(NAMESPACES, None, name)
    except ApiError:
        service.create(NAMESPACES, None, {"metadata": {"name": name}})


def admit(service: ObjectService, doc: dict[str, Any], validation: str = "Strict") -> str:
    """What a dry-run create of `doc` gets: "accepted", or the refusal."""
    info = _kind_info(doc)
    if info is None:
        return (
            f'not served: no matches for kind "{doc.get("kind")}" in version'
            f' "{doc.get("apiVersion")}" (kubectl stops before sending it)'
        )
    namespace = None
    if info.namespaced:
        namespace = (doc.get("metadata") or {}).get("namespace") or "default"
        _ensure_namespace(service, namespace)
    try:
        _, warnings = service.create(
            info, namespace, doc, dry_run=True, field_validation=validation
        )
        result = "accepted" + (f" (warnings: {'; '.join(warnings)})" if warnings else "")
    except ApiError as e:
        result = f"refused ({type(e).__name__}): {_stable(e.message, doc)}"
    if info.kind == "Schedule":
        why = cron_error(str((doc.get("spec") or {}).get("schedule", "")))
        result += f"; its schedule, to the reconciler: {why or 'taken'}"
    return result


def _stable(message: str, doc: dict[str, Any]) -> str:
    """`message` with a name made from generateName written as `<generateName>xxxxx`."""
    meta = doc.get("metadata") or {}
    prefix = meta.get("generateName")
    if prefix and not meta.get("name"):
        message = re.sub(rf'"{re.escape(prefix)}[a-z0-9]{{5}}"', f'"{prefix}xxxxx"', message)
    return message


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main() -> int:
    print("| sample | kind | today (Strict) | unknown fields dropped (Ignore) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as scratch:
        service = ObjectService(Path(scratch) / "state.db", REGISTRY)
        try:
            for anchor in ANCHORS:
                for path in sorted((HERE / anchor).glob("*.yaml")):
                    doc = yaml.safe_load(path.read_text())
                    strict = admit(service, doc)
                    ignore = admit(service, doc, "Ignore") if "unknown field" in strict else "same"
                    row = (f"{anchor}/{path.name}", str(doc.get("kind")), strict, ignore)
                    print("| " + " | ".join(_cell(cell) for cell in row) + " |")
        finally:
            service.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
