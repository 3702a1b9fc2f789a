"""`diskferry cbt enable|status|disable`: changed-block tracking on a raw volume."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from diskferry.cli.cancel import cancellable
from diskferry.cli.common import note, print_json
from diskferry.cli.help_text import PlainTyper

if TYPE_CHECKING:
    from diskferry.qemu import CbtDisk

cbt_app = PlainTyper(
    help="""Changed-block tracking: a qcow2 metadata overlay whose bitmaps mark what changed.

Wherever a command takes a disk path, the raw volume and its overlay both work.""",
    no_args_is_help=True,
)

Volume = Annotated[str, typer.Argument(help="The raw volume, or its .cbt.qcow2 overlay.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _change(kind: str, volume: str) -> CbtDisk:
    from diskferry.backup import CbtJob, change_cbt
    from diskferry.disk import Progress

    with cancellable():
        return change_cbt(CbtJob(kind=kind, volume=volume), Progress())


@cbt_app.command("enable")
def enable_command(volume: Volume, json_out: JsonOut = False) -> None:
    """Make VOLUME.cbt.qcow2 while the VM is stopped; run the VM on it to track writes.

    VOLUME is a raw volume; `VOLUME.cbt.qcow2` is a qcow2 metadata overlay whose data file is
    the volume. Run the VM on the overlay (format qcow2): its writes are tracked in
    persistent dirty bitmaps and the volume stays a valid raw image. A volume that holds an
    image format (qcow2, vmdk, vhd, vhdx, vdi) is refused, naming it: an overlay over a
    container would let the VM corrupt it.
    """
    from diskferry.qemu import cbt_status

    disk = _change("cbtEnable", volume)
    if json_out:
        print_json(cbt_status(disk.volume).to_json())
        return
    note(f"CBT enabled on {disk.volume}: run the VM on {disk.overlay} (qcow2) to track writes")


@cbt_app.command("status")
def status_command(volume: Volume, json_out: JsonOut = False) -> None:
    """Show whether VOLUME has CBT, and its checkpoints.

    Whether VOLUME (or its overlay) has CBT, its size, and its checkpoints: name,
    repository, granularity, recording or stopped, in use, and the bytes its bitmap marks
    dirty (`dirtyBytes`, read through a read-only qemu-storage-daemon; null while a QEMU has
    the overlay open).
    """
    from diskferry.disk import format_size
    from diskferry.qemu import cbt_status

    state = cbt_status(volume)
    if json_out:
        print_json(state.to_json())
        return
    print(f"volume: {state.disk.volume}")
    if state.disk.overlay is None:
        print("cbt: off")
        note(f"enable it with: diskferry cbt enable {state.disk.volume}")
        return
    print(f"overlay: {state.disk.overlay}")
    print(f"size: {format_size(state.size)}")
    print(f"checkpoints: {len(state.checkpoints)}")
    for c in state.checkpoints:
        dirty = "?" if c.dirty_bytes is None else format_size(c.dirty_bytes)
        flags = ["recording" if c.enabled else "stopped"] + (["in use"] if c.in_use else [])
        print(f"  {c.name}  {dirty} dirty  {', '.join(flags)}")
    if any(c.in_use for c in state.checkpoints):
        note("in use: open in a QEMU, or left inconsistent by a killed one; dirty bytes unknown")


@cbt_app.command("disable")
def disable_command(volume: Volume, json_out: JsonOut = False) -> None:
    """Remove VOLUME's overlay and its checkpoints; the volume keeps its data.

    Refused while a QEMU has the overlay open.
    """
    disk = _change("cbtDisable", volume)
    if json_out:
        print_json({"volume": disk.volume, "enabled": False})
        return
    note(f"CBT disabled on {disk.volume}: its next backup reads it whole")


def register(app: typer.Typer) -> None:
    """Add `cbt` to the `diskferry` command."""
    app.add_typer(cbt_app, name="cbt")
