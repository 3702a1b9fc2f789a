"""Plain text made safe for markdown: what would read as HTML is escaped outside code spans."""

from __future__ import annotations


def escaped(text: str) -> str:
    """`text` with `<` outside backquoted code spans written `&lt;`, so that a placeholder such
    as vd-<disk>-<uid> is shown rather than taken for an HTML tag."""
    parts = text.split("`")
    for index in range(0, len(parts), 2):  # the even parts lie outside code spans
        parts[index] = parts[index].replace("<", "&lt;")
    return "`".join(parts)
