"""Names made from other names (a Backup's DataUploads, a Restore's DataDownloads, label values):
at most 63 characters, so that each is a valid label value and DNS-1123 name; a longer one is cut
and ends in a short hash of the whole, so that two long names stay apart."""

from __future__ import annotations

import hashlib

MAX_LENGTH = 63
"""The longest label value (and DNS-1123 label) Kubernetes takes."""
HASH_LENGTH = 8


def short_name(*parts: str) -> str:
    """The parts joined by '-', or when that is longer than MAX_LENGTH its head and a hash."""
    whole = "-".join(parts)
    if len(whole) <= MAX_LENGTH:
        return whole
    digest = hashlib.sha256(whole.encode()).hexdigest()[:HASH_LENGTH]
    head = whole[: MAX_LENGTH - HASH_LENGTH - 1].rstrip("-.")
    return f"{head}-{digest}"
