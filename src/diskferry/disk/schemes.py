"""What kind of source a name is, told from its prefix alone: docker://, oci: or nbd[s]://."""

from __future__ import annotations

import re

_LOOKS_LIKE_NBD = re.compile(r"^nbds?(\+[a-z0-9]+)?://", re.IGNORECASE)


def is_reference(text: str) -> bool:
    """Whether `text` is a docker:// reference."""
    return text.startswith("docker://")


def is_layout_reference(text: str) -> bool:
    """Whether `text` is an oci:DIR[:TAG] reference."""
    return text.startswith("oci:")


def is_nbd_url(spec: str) -> bool:
    """Whether `spec` is meant as an NBD URL (nbd://, nbds://, nbd+unix://, ...)."""
    return bool(_LOOKS_LIKE_NBD.match(spec))
