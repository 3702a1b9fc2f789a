"""docs/resources.md: every kind the API serves and every field of it, made from the models'
schemas (the ones the CRDs carry), with what tests/anchors/FIELDS.md says each mirrors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from anchor_fields import Anchor, anchors
from markdown_text import escaped

from diskferry.control.apiserver.crd import TOP_LEVEL, openapi_schema
from diskferry.control.resources.kinds import KindInfo
from diskferry.control.resources.model import GROUP
from diskferry.control.resources.registry import REGISTRY

Schema = dict[str, Any]
CONDITIONS_PATH = "status.conditions"

INTRO = """\
Every kind the daemon (`diskferry serve`) and the operator serve, and every field of each, with
its type, its default and the values it takes. Objects have the Kubernetes shape: `apiVersion`,
`kind`, `metadata`, `spec`, and a `status` with `phase`, `conditions` and
`observedGeneration`. Field names, types, phases and columns are those of the anchor each kind
mirrors (Deckhouse virtualization, KubeVirt's export and backup APIs, Velero), so the anchors'
manifests apply with only their `apiVersion` changed; tests/anchors/FIELDS.md compares them
field by field, and each field below says what it found.

- Unknown fields and bad values are refused with the field's path (`spec.persistentVolumeClaim.size:
  '64Mb' is not a quantity ...`).
- Sizes are Kubernetes quantities (`64Mi`, `1G`, `1.5Gi`, `100`); durations are Go's (`2h`,
  `1h30m`).
- A spec is fixed once created, but where its field says it may change (a VirtualDisk's
  `spec.persistentVolumeClaim.size` may grow, as Deckhouse has it).
- A field accepted only because an anchor has it says "Accepted, with no effect here"; the API
  answers a write that sets it with `Warning: 299 - "PATH: has no effect here: WHY"`.
- `diskferry crds` prints the CustomResourceDefinitions made from the same models (schema,
  print columns, status subresource, short names); `kubectl explain` shows each description.
"""


@dataclass
class _Samples:
    """The manifests that show each kind: the project's examples and the anchors' samples."""

    examples: dict[str, list[Path]]
    anchors: dict[str, list[Path]]


def _kinds_of(folder: Path) -> dict[str, list[Path]]:
    """Each kind that the YAML files in `folder` hold, and the files that hold it."""
    found: dict[str, list[Path]] = {}
    for path in sorted(folder.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and "kind" in document:
                files = found.setdefault(document["kind"], [])
                if path not in files:
                    files.append(path)
    return found


def _type(node: Schema) -> str:
    """A field's type in words: string, integer, list of object, map of string."""
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_type(node.get('items', {}))}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of {_type(node['additionalProperties'])}"
    return f"{kind} ({node['format']})" if "format" in node else kind


def _facts(node: Schema, required: bool) -> list[str]:
    """What a field's schema fixes beside its type: required, default, allowed values, bounds."""
    facts = ["required"] if required else []
    if "default" in node:
        facts.append(f"default `{json.dumps(node['default'])}`")
    if "enum" in node:
        facts.append("one of " + ", ".join(f"`{value}`" for value in node["enum"]))
    if "pattern" in node:
        facts.append(f"matches `{node['pattern']}`")
    for key, words in (
        ("minimum", "at least"),
        ("maximum", "at most"),
        ("minLength", "length at least"),
        ("maxLength", "length at most"),
        ("minItems", "items at least"),
        ("maxItems", "items at most"),
    ):
        if key in node:
            facts.append(f"{words} {node[key]}")
    return facts


def _fields(node: Schema, path: str) -> Iterator[tuple[str, Schema, bool]]:
    """Each field under `node`: its path (`spec.volumes[].name`), its schema, and whether it is
    required, in the order of the model."""
    required = set(node.get("required", ()))
    for name, child in (node.get("properties") or {}).items():
        here = f"{path}.{name}" if path else name
        yield here, child, name in required
        yield from _nested(child, here)


def _nested(node: Schema, path: str) -> Iterator[tuple[str, Schema, bool]]:
    """The fields of the objects a field holds: its own, its items' or its values'."""
    yield from _fields(node, path)
    if isinstance(node.get("items"), dict):
        yield from _nested(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nested(node["additionalProperties"], f"{path}{{}}")


def _field(path: str, node: Schema, required: bool, anchor: Anchor | None) -> str:
    """One field as a list item: path, type and facts, description, rules, anchor; of
    `status.conditions`, the description's first paragraph (the kind's Conditions table says
    the rest)."""
    head = "; ".join([_type(node), *_facts(node, required)])
    text = [node.get("description", "")]
    if path == CONDITIONS_PATH:
        text = [text[0].split("\n\n")[0], "Each type is in the Conditions table above."]
    rules = [rule["message"] for rule in node.get("x-kubernetes-validations", ())]
    if rules:
        text.append("Rules: " + "; ".join(rules) + ".")
    if anchor is not None and path in anchor.fields:
        text.append(f"{anchor.name}: {anchor.fields[path]}.")
    elif anchor is not None and path in anchor.own:
        text.append(f"Not in {anchor.name}'s API.")
    body = " ".join(" ".join(part.split()) for part in text if part)
    return f"- `{path}` ({head}): {escaped(body)}"


def _conditions(info: KindInfo) -> list[str]:
    """The table of the condition types the kind carries, each with what it means."""
    if not info.model.CONDITIONS:
        return []
    lines = [
        "Conditions (`status.conditions`, by type):",
        "",
        "| type | what it means |",
        "|---|---|",
    ]
    lines += [
        f"| `{kind}` | {escaped(meaning)} |" for kind, meaning in info.model.CONDITIONS.items()
    ]
    return [*lines, ""]


def _listed(title: str, paths: list[Path], root: Path) -> list[str]:
    """A line naming files by their paths from the root, linked from docs/."""
    if not paths:
        return []
    names = [f"[`{p.relative_to(root)}`](../{p.relative_to(root)})" for p in paths]
    return [f"{title}: {', '.join(names)}.", ""]


def _kind(info: KindInfo, anchor: Anchor | None, root: Path, samples: _Samples) -> list[str]:
    """The section of one kind: names, anchor, description, samples, columns, fields."""
    schema = openapi_schema(info)
    names = ", ".join(f"`{name}`" for name in info.short_names) or "none"
    scope = "namespaced" if info.namespaced else "cluster-scoped"
    lines = [
        f"## {info.kind}",
        "",
        f"`{info.api_version}`, {scope}; plural `{info.plural}`, short names {names}.",
        "",
    ]
    if anchor is not None:
        lines += [f"Mirrors {anchor.source} {info.kind}.", ""]
    elif info.group != GROUP:
        lines += ["Kubernetes' own kind, in Kubernetes' shape.", ""]
    else:
        lines += ["diskferry's own kind: no anchor has it.", ""]
    for paragraph in schema.get("description", "").split("\n\n"):
        lines += [escaped(paragraph), ""]
    lines += _listed("Examples", samples.examples.get(info.kind, []), root)
    lines += _listed("The anchor's own samples", samples.anchors.get(info.kind, []), root)
    lines += ["Columns (`-o wide` adds those marked wide):", "", "| column | value |", "|---|---|"]
    for column in info.columns:
        wide = " (wide)" if column.priority else ""
        lines.append(f"| {column.name}{wide} | `{column.json_path}` |")
    lines += ["", *_conditions(info), "Fields:", ""]
    own = {key: value for key, value in schema["properties"].items() if key not in TOP_LEVEL}
    lines += [_field(*found, anchor) for found in _fields({**schema, "properties": own}, "")]
    return [*lines, ""]


def render(root: Path) -> str:
    """docs/resources.md's text, for the repository at `root`."""
    anchored = anchors(root / "tests/anchors/FIELDS.md")
    samples = _Samples(_kinds_of(root / "examples"), {})
    for folder in sorted(p for p in (root / "tests/anchors").iterdir() if p.is_dir()):
        for kind, paths in _kinds_of(folder).items():
            samples.anchors.setdefault(kind, []).extend(paths)
    lines = [
        "# Resource reference",
        "",
        "<!-- Made by `make docs` (tools/gen_docs.py) from the models under",
        "src/diskferry/control/resources/: edit a field's description there, then run",
        "`make docs`. -->",
        "",
        INTRO,
        "| kind | apiVersion | short names | scope |",
        "|---|---|---|---|",
    ]
    for info in REGISTRY.kinds:
        names = ", ".join(f"`{name}`" for name in info.short_names)
        scope = "namespaced" if info.namespaced else "cluster"
        anchor = info.kind.lower()
        lines.append(f"| [{info.kind}](#{anchor}) | `{info.api_version}` | {names} | {scope} |")
    lines.append("")
    for info in REGISTRY.kinds:
        lines += _kind(info, anchored.get(info.kind), root, samples)
    return "\n".join(lines).rstrip("\n") + "\n"
