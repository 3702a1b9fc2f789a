"""What tests/anchors/FIELDS.md says each kind mirrors: its anchor, and each field's match."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_ANCHOR = re.compile(r"^Anchor: (?P<who>[^`]*`[^`]+`)")
_CELLS = re.compile(r"(?<!\\)\|")
_OWN = "diskferry only: "
_PATH = re.compile(r"`([a-zA-Z][\w.\[\]]*)`")


@dataclass
class Anchor:
    """One kind's anchor as FIELDS.md gives it."""

    source: str
    """Whose API, which version: Deckhouse virtualization `virtualization.deckhouse.io/v1alpha2`."""
    fields: dict[str, str] = field(default_factory=dict)
    """Each anchor field's path (`spec.source.kind`, `status.volumes[].name`) and what
    diskferry has for it (`same`, `different: ...`, `accepted, no effect: ...`, `missing`)."""
    own: set[str] = field(default_factory=set)
    """The paths of the fields diskferry has and the anchor lacks (its "diskferry only")."""

    @property
    def name(self) -> str:
        """Whose API it is, in one word: Deckhouse, KubeVirt, Velero."""
        return self.source.split()[0]


def _cells(row: str) -> list[str]:
    """A markdown table row's cells, an escaped `\\|` kept inside its cell."""
    return [cell.strip().replace("\\|", "|") for cell in _CELLS.split(row.strip())[1:-1]]


def anchors(path: Path) -> dict[str, Anchor]:
    """Each kind of FIELDS.md that has an anchor, by its kind name."""
    found: dict[str, Anchor] = {}
    kind = None
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            kind = line[3:].strip()
        elif kind and (match := _ANCHOR.match(line)):
            found[kind] = Anchor(match["who"])
        elif kind in found and line.startswith(_OWN):
            found[kind].own.update(_PATH.findall(line))
        elif kind in found and line.startswith("| `"):
            cells = _cells(line)
            if len(cells) == 5:
                found[kind].fields[cells[0].strip("`")] = cells[4]
    return found
