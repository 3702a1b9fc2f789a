"""The progress bar on a real terminal of 80 columns: the label once, sizes with their unit,
every frame on one line."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pexpect

EXE = str(Path(sys.executable).with_name("diskferry"))
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FRAME = re.compile(r"^import +[━╸╺╾─ ]+ +\d+% +[\d.]+/[\d.]+ MiB +[\d.]+ (B|KiB|MiB|GiB)/s ")


def test_the_import_bar_fits_80_columns(faulty, tmp_path: Path) -> None:
    source = tmp_path / "src.img"
    source.write_bytes(b"\1" * (32 << 20))
    url = faulty.add("disk.img", source, piece=1 << 20, trickle=0.04)
    child = pexpect.spawn(
        EXE,
        ["import", url, str(tmp_path / "out.img")],
        encoding="utf-8",
        dimensions=(24, 80),
        timeout=60,
    )
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    lines = [ln for ln in re.split(r"[\r\n]+", _ANSI.sub("", child.before)) if ln.strip()]
    frames = [ln for ln in lines if ln.startswith("import")]
    assert frames, lines
    assert all(len(ln) <= 80 for ln in frames), [ln for ln in frames if len(ln) > 80]
    assert all("import import" not in ln.lower() for ln in frames), frames
    assert any(_FRAME.match(ln) for ln in frames), frames
    assert lines[-1].startswith("diskferry: imported raw into ")
    assert "(raw, 32.0 MiB)" in lines[-1]
