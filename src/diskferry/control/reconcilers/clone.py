"""A file claim cloned from another file by sharing its extents (`cp --reflink=always`), at
once and without copying, where the filesystem can; nothing is left behind where it cannot."""

from __future__ import annotations

import os
import subprocess
import tempfile

from diskferry.control.volumes import Claim
from diskferry.disk.prime import Target


def reflink(source: str, claim: Claim, job_id: str, size: int | None = None) -> bool:
    """Clone `source` into the file claim, grown to `size` when larger, and commit it with
    `job_id`; False where the filesystem cannot share extents."""
    if claim.block:
        return False
    target = Target(claim.path)
    try:
        done = subprocess.run(
            ["cp", "--reflink=always", source, target.prime],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            return False
        if size is not None and size > os.stat(target.prime).st_size:
            os.truncate(target.prime, size)
        target.commit(job_id)
        return True
    finally:
        target.discard()


def reflink_works(directory: str) -> bool:
    """Whether the filesystem of `directory` shares extents, tried on two files of its own."""
    with tempfile.TemporaryDirectory(dir=directory, prefix=".reflink-") as tried:
        source = os.path.join(tried, "source")
        with open(source, "wb") as f:
            f.write(b"\0" * 4096)
        done = subprocess.run(
            ["cp", "--reflink=always", source, os.path.join(tried, "clone")],
            capture_output=True,
            check=False,
        )
        return done.returncode == 0
