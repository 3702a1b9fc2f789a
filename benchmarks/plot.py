"""Line plots of benchmark results as PNG files, one panel a measured quantity."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Series:
    """One line: a label for the legend and its points."""

    label: str
    xs: list[float]
    ys: list[float]
    dashed: bool = False

    @classmethod
    def of(cls, label: str, points: list[tuple[float, float]], dashed: bool = False) -> Series:
        """A line through `points`, (x, y) pairs."""
        return cls(label, [x for x, _ in points], [y for _, y in points], dashed)


@dataclass
class Panel:
    """One set of axes: what the y axis measures, with its unit, and the lines on it."""

    ylabel: str
    series: list[Series] = field(default_factory=list)
    logy: bool = False


@dataclass
class Plot:
    """A figure of panels side by side sharing one x axis quantity."""

    title: str
    xlabel: str
    panels: list[Panel]
    logx: bool = False


def save_plot(plot: Plot, path: Path) -> None:
    """Draw `plot` and write it to `path` as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    fig, axes = pyplot.subplots(
        1, len(plot.panels), figsize=(6 * len(plot.panels), 4.5), squeeze=False
    )
    for ax, panel in zip(axes[0], plot.panels, strict=True):
        for s in panel.series:
            ax.plot(s.xs, s.ys, "--" if s.dashed else "-o", label=s.label)
        ax.set_xlabel(plot.xlabel)
        ax.set_ylabel(panel.ylabel)
        if plot.logx:
            ax.set_xscale("log")
        if panel.logy:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(plot.title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    pyplot.close(fig)
