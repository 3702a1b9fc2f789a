"""A benchmark table as Markdown: a title, a header, rows of cells and notes beneath."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Table:
    """One table of results; cells are text, already formatted."""

    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """The table as Markdown, a `###` heading first, the notes after it."""

        def line(cells: list[str]) -> str:
            return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

        lines = [f"### {self.title}", "", line(self.header), "|---" * len(self.header) + "|"]
        lines += [line(row) for row in self.rows]
        if self.notes:
            lines += ["", *self.notes]
        return "\n".join(lines)


def mib(n: float) -> str:
    """Bytes as MiB, one decimal."""
    return f"{n / 2**20:.1f} MiB"


def size(n: int) -> str:
    """A disk size: whole GiB where it is one, else MiB."""
    return f"{n >> 30} GiB" if n >= 1 << 30 and n % (1 << 30) == 0 else f"{n >> 20} MiB"
