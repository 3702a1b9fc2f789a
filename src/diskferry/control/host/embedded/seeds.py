"""A VM's first-boot seed: an ISO 9660 image of a few files, written into the VM's folder and
attached as a CD-ROM, as KubeVirt attaches a NoCloud (`cidata`) or sysprep volume. It is made
with `xorrisofs` (Debian's xorriso), the tool KubeVirt uses, with Joliet and Rock Ridge names;
the image is 0600, and the files it is made from never outlive the call."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from diskferry.control.host.machines import SeedError
from diskferry.registry.layout import private_folder

XORRISOFS = "xorrisofs"
SEED_SECONDS = 60


def write_seed(path: Path, label: str, files: dict[str, bytes]) -> Path:
    """Write `files` (name: content, at the image's root) as an ISO labelled `label` at `path`,
    replacing what was there; `path`."""
    private_folder(path.parent)
    staging = Path(tempfile.mkdtemp(prefix=".seed-", dir=path.parent))
    image = staging / "seed.iso"
    try:
        content = staging / "content"
        content.mkdir(mode=0o700)
        for name, data in files.items():
            (content / Path(name).name).write_bytes(data)
        argv = [XORRISOFS, "-quiet", "-volid", label, "-joliet", "-rock", "-o", str(image)]
        try:
            done = subprocess.run(
                [*argv, str(content)], capture_output=True, timeout=SEED_SECONDS, check=False
            )
        except FileNotFoundError:
            raise SeedError(f"{XORRISOFS} is not installed (Debian's xorriso package)") from None
        except subprocess.TimeoutExpired:
            raise SeedError(f"{XORRISOFS} did not finish within {SEED_SECONDS} s") from None
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip().splitlines()
            raise SeedError(f"{XORRISOFS} failed: {said[-1] if said else done.returncode}")
        os.chmod(image, 0o600)
        os.replace(image, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path
