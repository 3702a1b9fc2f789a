"""`diskferry apply|get|describe|delete|logs|wait`: the daemon's resources, as kubectl has them."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from diskferry.base import DiskferryError
from diskferry.cli.common import fail_line
from diskferry.cli.server_options import parse_duration

if TYPE_CHECKING:  # each command imports what it uses, so that other commands start fast
    from diskferry.cli.daemon_client import DaemonClient, ResourceType
    from diskferry.cli.manifests import Manifest

KubeconfigOpt = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig", metavar="FILE", help="Kubeconfig of the daemon (else $KUBECONFIG)."
    ),
]
DataDirOpt = Annotated[
    str | None,
    typer.Option(
        "--data-dir", metavar="DIR", help="The daemon's data directory, whose kubeconfig is used."
    ),
]
NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        metavar="NAMESPACE",
        help="Namespace (else the kubeconfig's, or default).",
    ),
]
KindArg = Annotated[
    str, typer.Argument(metavar="KIND", help="Kind, plural or short name (vd, vi, vmexport...).")
]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The object's name.")]
TimeoutOpt = Annotated[
    str, typer.Option("--timeout", metavar="DURATION", help="How long to wait: 30s, 5m, 1h.")
]
OUTPUTS = ("wide", "yaml", "json", "name")
# what `apply` leaves to the server: set by it, or the status subresource's
SERVER_FIELDS = ("apiVersion", "kind", "metadata", "status")


def _namespace(client: DaemonClient, info: ResourceType, namespace: str | None) -> str | None:
    if not info.namespaced:
        return None
    return namespace or client.endpoint.namespace


def _warn(client: DaemonClient) -> None:
    for warning in client.warnings:
        text = warning.split('"', 1)[-1].rstrip('"') if warning.startswith("299") else warning
        print(f"Warning: {text}", file=sys.stderr)


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without what changes on every write, to tell a change from none."""
    meta = obj.get("metadata", {})
    kept = {k: v for k, v in meta.items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": kept}


def _apply_one(client: DaemonClient, manifest: Manifest, namespace: str | None) -> str:
    from diskferry.cli.daemon_client import MERGE_PATCH, DaemonError
    from diskferry.cli.manifests import check

    check(manifest)
    body = manifest.body
    info = client.type_of(body["apiVersion"], body["kind"])
    meta = dict(body["metadata"])
    where = meta.get("namespace")
    if info.namespaced:
        if namespace and where and where != namespace:
            raise DiskferryError(
                f"the namespace of the object ({where}) does not match "
                f"the namespace given ({namespace})"
            )
        meta["namespace"] = where or namespace or client.endpoint.namespace
    body = {**body, "metadata": meta}
    ns = meta.get("namespace")
    strict = {"fieldValidation": "Strict"}
    name = meta.get("name")
    existing = None
    if name:
        try:
            existing = client.request("GET", info.path(ns, name))
        except DaemonError as e:
            if e.code != 404:
                raise
    if existing is None:
        created = client.request("POST", info.path(ns), body=body, params=strict)
        _warn(client)
        return f"{info.ref(created['metadata']['name'])} created"
    patch = {k: v for k, v in body.items() if k not in SERVER_FIELDS}
    patch["metadata"] = {
        key: meta[key] for key in ("labels", "annotations") if meta.get(key) is not None
    }
    path = info.path(ns, name)
    trial = client.request(
        "PATCH",
        path,
        body=patch,
        content_type=MERGE_PATCH,
        params={**strict, "dryRun": "All"},
    )
    if _comparable(trial) == _comparable(existing):
        return f"{info.ref(name)} unchanged"
    client.request("PATCH", path, body=patch, content_type=MERGE_PATCH, params=strict)
    _warn(client)
    return f"{info.ref(name)} configured"


def apply_command(
    files: Annotated[
        list[str],
        typer.Option(
            "--filename", "-f", metavar="FILE", help="A manifest file, a directory of them, or -."
        ),
    ],
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    data_dir: DataDirOpt = None,
) -> int:
    """Create or update the objects in the manifests.

    Reads multi-document YAML (or JSON, or a `List`) from a file, each file of a directory,
    or stdin (`-`), and prints `virtualdisk.diskferry.io/vd1 created`, `configured` or
    `unchanged` for each object.
    """
    from diskferry.cli.daemon_client import DaemonUnreachableError, connect
    from diskferry.cli.manifests import load

    manifests = load(files)
    client = connect(kubeconfig, data_dir)
    failed = 0
    for manifest in manifests:
        try:
            print(_apply_one(client, manifest, namespace), flush=True)
        except DaemonUnreachableError:
            raise
        except DiskferryError as e:
            fail_line(f"{manifest.source}: {e.message}")
            failed += 1
    return 1 if failed else 0


def _dump(obj: dict[str, Any], output: str) -> None:
    import yaml

    if output == "json":
        print(json.dumps(obj, indent=4))
    else:
        print(yaml.safe_dump(obj, sort_keys=False), end="")


def get_command(
    kind: KindArg,
    name: Annotated[str | None, typer.Argument(metavar="NAME", help="One object's name.")] = None,
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Every namespace.")
    ] = False,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", metavar="FORMAT", help="wide, yaml, json or name."),
    ] = (None),
    follow: Annotated[bool, typer.Option("--watch", "-w", help="Follow changes.")] = False,
    kubeconfig: KubeconfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """List objects of a kind, or show one, as a table or as YAML or JSON.

    The table has the server's print columns (`-o wide` adds the rest); `-w` follows
    changes, on a terminal with a live progress bar, phase and download speed for each
    object in progress.
    """
    from diskferry.cli.daemon_client import TABLE, connect
    from diskferry.cli.resource_view import print_table, table_rows
    from diskferry.cli.watch_view import watch

    if output is not None and output not in OUTPUTS:
        raise typer.BadParameter(f"use one of {', '.join(OUTPUTS)}", param_hint="--output")
    client = connect(kubeconfig, data_dir)
    info = client.resource_type(kind)
    ns = None if all_namespaces else _namespace(client, info, namespace)
    if follow:
        watch(client, info, ns, name, output or "")
        return
    path = info.path(ns, name)
    if output in ("yaml", "json"):
        answer = client.request("GET", path)
        if name is None:
            answer = {"apiVersion": "v1", "kind": "List", "items": answer.get("items", [])}
        _dump(answer, output)
        return
    if output == "name":
        answer = client.request("GET", path)
        for obj in answer.get("items", [answer] if name else []):
            print(info.ref(obj["metadata"]["name"]))
        return
    answer = client.request("GET", path, accept=TABLE)
    headers, rows = table_rows(
        answer, wide=output == "wide", namespaces=ns is None and info.namespaced
    )
    if not rows:
        where = f" in {ns} namespace" if ns else ""
        print(f"No resources found{where}.", file=sys.stderr)
        return
    print_table(headers, rows)


def _events(client: DaemonClient, obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    events = client.resource_type("events")
    listed = client.request("GET", events.path(meta.get("namespace")))

    def about(event: dict[str, Any]) -> bool:
        involved = event.get("involvedObject", {})
        if involved.get("uid") and meta.get("uid"):
            return involved["uid"] == meta["uid"]
        return (involved.get("kind"), involved.get("name")) == (obj["kind"], meta["name"])

    found = [e for e in listed.get("items", []) if about(e)]
    return sorted(found, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def describe_command(
    kind: KindArg,
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Show an object's fields, its conditions and its events.

    A Secret's data is shown only as sizes.
    """
    from diskferry.cli.daemon_client import connect
    from diskferry.cli.resource_view import describe

    client = connect(kubeconfig, data_dir)
    info = client.resource_type(kind)
    obj = client.request("GET", info.path(_namespace(client, info, namespace), name))
    print(describe(obj, _events(client, obj)))


def delete_command(
    kind: KindArg,
    names: Annotated[list[str], typer.Argument(metavar="NAME...", help="The objects' names.")],
    namespace: NamespaceOpt = None,
    wait: Annotated[bool, typer.Option("--wait", help="Return once they are gone.")] = False,
    timeout: TimeoutOpt = "5m",
    kubeconfig: KubeconfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Delete objects; with --wait, until their finalizers have run and they are gone."""
    from diskferry.cli.daemon_client import connect
    from diskferry.cli.resource_wait import Want, wait_for

    seconds = parse_duration(timeout)
    client = connect(kubeconfig, data_dir)
    info = client.resource_type(kind)
    ns = _namespace(client, info, namespace)
    for name in names:
        client.request("DELETE", info.path(ns, name))
        print(f'{info.qualified} "{name}" deleted', flush=True)
    if wait:
        for name in names:
            wait_for(client, info, ns, name, Want("delete"), seconds)


def logs_command(
    kind: KindArg,
    name: NameArg,
    namespace: NamespaceOpt = None,
    kubeconfig: KubeconfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Print the captured log of the object's worker.

    The last lines of the worker that did the object's work (its import, export or data
    mover), kept while the object exists; of a VirtualMachine, the last lines of its
    `qemu.log`.
    """
    from diskferry.cli.daemon_client import connect

    client = connect(kubeconfig, data_dir)
    info = client.resource_type(kind)
    text = client.text(info.path(_namespace(client, info, namespace), name, "log"))
    sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def wait_command(
    kind: KindArg,
    name: NameArg,
    for_: Annotated[
        str,
        typer.Option(
            "--for", metavar="CONDITION", help="delete, phase=PHASE or condition=TYPE[=STATUS]."
        ),
    ],
    namespace: NamespaceOpt = None,
    timeout: TimeoutOpt = "30s",
    kubeconfig: KubeconfigOpt = None,
    data_dir: DataDirOpt = None,
) -> None:
    """Wait until an object has a phase or a condition, or is deleted; fail when it fails.

    `--for` takes `phase=PHASE`, `condition=TYPE[=STATUS]` or `delete`. It ends with `...
    condition met`, or exits 1 with one line on timeout or when the object turns Failed
    (with its reason and message).
    """
    from diskferry.cli.daemon_client import connect
    from diskferry.cli.resource_wait import parse_for, wait_for

    want = parse_for(for_)
    seconds = parse_duration(timeout)
    client = connect(kubeconfig, data_dir)
    info = client.resource_type(kind)
    wait_for(client, info, _namespace(client, info, namespace), name, want, seconds)
    print(f"{info.ref(name)} condition met")


def register(app: typer.Typer) -> None:
    """Add the resource commands to `app`."""
    app.command("apply")(apply_command)
    app.command("get")(get_command)
    app.command("describe")(describe_command)
    app.command("delete")(delete_command)
    app.command("logs")(logs_command)
    app.command("wait")(wait_command)
