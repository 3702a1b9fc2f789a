"""A file claim cloned from another file by sharing its extents (`cp --reflink=always`), at
once and without copying, where the filesystem can; nothing is left behind where it cannot."""

from __future__ import annotations

import os
import subprocess

from diskferry.control.host.volumes import Claim
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
