"""The bench's figure: size against write time and, when ``--read`` ran, against the
training loader's records/s; accuracy difference as colour.

Each cell is a number beside its marker (cells on one spot share one label, e.g.
"3,4") and a line of the key beside the axes; the numbers take the first place
around their marker where they overlap no other number, marker or axes edge. The
input is a dashed line at its size (and a star at its loader speed). Every text of
the figure stays clear of every other (``tests`` check the renderer's boxes).
"""

from __future__ import annotations

import math
import os
from typing import Any

from .recommend import describe
from .results import BenchReport, Cell

__all__ = ["figure", "pareto", "save_plot", "title"]

#: Candidate offsets (points) of a cell's number from its marker: nearest first, all round.
_OFFSETS = [
    (r * dx, r * dy)
    for r in (5, 9, 14, 20, 28, 38, 50, 65, 85, 110)
    for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (0, 1), (-1, 0), (0, -1))
]
#: Markers closer than this (pixels) share one label ("3,4"): equal cells coincide.
_SAME_SPOT = 6.0


def title(report: BenchReport) -> str:
    """The figure's title: the input's name (a folder's too), and the probe."""
    name = os.path.basename(os.path.normpath(report.source)) or report.source
    probe = f", probe: {report.probe}" if report.probe else ""
    return f"dstore bench: {name}{probe}"


def pareto(cells: list[Cell], y: str = "write_s", higher_better: bool = False) -> list[Cell]:
    """Cells no other cell beats on both size and ``y`` (lower is better unless told)."""
    ok = [c for c in cells if c.measured and not math.isnan(getattr(c, y))]

    def better(o: Cell, c: Cell) -> bool:
        oy, cy = getattr(o, y), getattr(c, y)
        if higher_better:
            oy, cy = -oy, -cy
        return o.bytes <= c.bytes and oy <= cy and (o.bytes < c.bytes or oy < cy)

    return [c for c in ok if not any(better(o, c) for o in ok)]


def _overlaps(a: Any, b: Any, pad: float = 1.0) -> bool:
    return bool(a.x0 < b.x1 + pad and b.x0 < a.x1 + pad and a.y0 < b.y1 + pad and b.y0 < a.y1 + pad)


def _same_spots(pix: list[tuple[float, ...]]) -> list[list[int]]:
    groups: list[list[int]] = []
    for i, p in enumerate(pix):
        near = next((g for g in groups if math.dist(pix[g[0]], p) <= _SAME_SPOT), None)
        if near is None:
            groups.append([i])
        else:
            near.append(i)
    return groups


def _free_offset(
    label: Any, renderer: Any, frame: Any, placed: list[Any], markers: list[Any]
) -> Any:
    fallback = None
    for offset in _OFFSETS:
        label.set_position(offset)
        box = label.get_window_extent(renderer)
        inside = (
            frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 <= box.y1 <= frame.y1
        )
        if not inside or any(_overlaps(box, b) for b in placed):
            continue
        if not any(_overlaps(box, m, 0.0) for m in markers):
            return offset
        fallback = fallback or offset
    return fallback


def _number_points(
    fig: Any, ax: Any, points: list[tuple[float, float]], numbers: list[int]
) -> None:
    """Write each point's number beside it, no two numbers overlapping."""
    from matplotlib.transforms import Bbox

    fig.canvas.draw()  # fixes the limits, so data -> pixel transforms hold from here
    renderer = fig.canvas.get_renderer()
    pix = [tuple(ax.transData.transform(p)) for p in points]
    markers = [Bbox.from_extents(x - 4, y - 4, x + 4, y + 4) for x, y in pix]
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = []
    for group in _same_spots(pix):
        text = ",".join(str(numbers[i]) for i in group)
        label = ax.annotate(
            text,
            points[group[0]],
            xytext=_OFFSETS[0],
            textcoords="offset points",
            fontsize=7,
            gid="cell-number",
            annotation_clip=False,
        )
        offset = _free_offset(label, renderer, frame, placed, markers)
        if offset is None:
            label.remove()
            continue
        label.set_position(offset)
        placed.append(label.get_window_extent(renderer))


def _panel(
    ax: Any, report: BenchReport, cells: list[Cell], y: str, ylabel: str, colour: Any
) -> Any:
    """One panel: the cells against size, the Pareto front joined, the input marked."""
    higher = y != "write_s"
    front = sorted(pareto(cells, y, higher_better=higher), key=lambda c: c.bytes)
    if front:
        ax.plot(
            [c.bytes / 1e6 for c in front],
            [getattr(c, y) for c in front],
            "-",
            color="0.75",
            zorder=1,
            label="Pareto front",
        )
    xs, ys = [c.bytes / 1e6 for c in cells], [getattr(c, y) for c in cells]
    art = ax.scatter(
        xs,
        ys,
        c=colour,
        cmap="RdYlGn" if colour is not None else None,
        s=28,
        zorder=2,
        edgecolors="0.3",
        linewidths=0.5,
        vmin=None if colour is None else -max(map(abs, colour), default=1) or -1,
        vmax=None if colour is None else max(map(abs, colour), default=1) or 1,
    )
    inp = report.input
    if inp is not None and inp.measured:
        ax.axvline(
            inp.bytes / 1e6,
            color="tab:blue",
            linestyle="--",
            linewidth=1,
            label="your input (size)",
        )
        if higher and not math.isnan(getattr(inp, y)):
            ax.plot(
                [inp.bytes / 1e6],
                [getattr(inp, y)],
                "*",
                ms=12,
                color="tab:blue",
                label="your input",
            )
    ax.set_xscale("log")
    ax.set_xlabel("size on disk (MB, log scale)")
    ax.set_ylabel(ylabel)
    return art


def _log_ticks(ax: Any, values: list[float]) -> None:
    """Plain-number labels on the log axis: 1-2-5 ticks over two decades or less, else
    one per decade; none on the minor ticks (their labels ran into each other)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    lo, hi = min(values, default=1.0), max(values, default=1.0)
    span = math.log10(hi / lo) if lo > 0 and hi > 0 else 0.0
    subs = (1.0, 2.0, 5.0) if span <= 2 else (1.0,)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.xaxis.set_minor_formatter(NullFormatter())


#: Lines of the key per column, and the width (inches) a column takes.
_KEY_ROWS, _KEY_COLUMN_IN, _PANEL_IN = 24, 2.6, 5.0


def _panels(report: BenchReport, cells: list[Cell]) -> list[tuple[str, str]]:
    """(figure, axis label) of each panel: write time; loader records/s with ``--read``."""
    panels = [("write_s", "write time (s)")]
    if report.settings.get("loader") and any(not math.isnan(c.loader_rps) for c in cells):
        panels.append(("loader_rps", f"{report.settings['loader']} loader (records/s)"))
    return panels


def _layout(plt: Any, panels: int, cells: int) -> tuple[Any, list[Any], Any, int]:
    """The figure, its panels' axes, the key's axes (beside them, so no tick label of a
    panel reaches it) and the key's columns."""
    columns = max(1, math.ceil((cells + 4) / _KEY_ROWS))  # the cells and the plot's lines
    widths = [_PANEL_IN] * panels + [_KEY_COLUMN_IN * columns]
    fig = plt.figure(figsize=(sum(widths), 4.8))
    grid = fig.add_gridspec(1, len(widths), width_ratios=widths, wspace=0.35)
    axes = [fig.add_subplot(grid[0, i]) for i in range(panels)]
    key_ax = fig.add_subplot(grid[0, panels])
    key_ax.axis("off")
    return fig, axes, key_ax, columns


def _shown(cells: list[Cell], y: str) -> list[Cell]:
    return [c for c in cells if not math.isnan(getattr(c, y))]


def figure(report: BenchReport) -> Any:
    """The plot of :func:`save_plot` as a matplotlib figure."""
    cells = [c for c in report.cells if c.measured and not math.isnan(c.write_s)]
    panels = _panels(report, cells)
    accuracy = not math.isnan(report.baseline_accuracy)
    colour = {id(c): 0.0 if math.isnan(c.accuracy_delta) else c.accuracy_delta for c in cells}
    fig, axes, key_ax, columns = _layout(_pyplot(), len(panels), len(cells))
    inp = report.input
    art = None
    for ax, (y, label) in zip(axes, panels, strict=True):
        shown = _shown(cells, y)
        art = _panel(
            ax, report, shown, y, label, [colour[id(c)] for c in shown] if accuracy else None
        )
        sizes = [c.bytes / 1e6 for c in shown] + ([inp.bytes / 1e6] if inp and inp.measured else [])
        _log_ticks(ax, sizes)
    fig.suptitle(title(report), fontsize=10)
    if accuracy and cells:
        bar = fig.colorbar(art, ax=axes, location="bottom", shrink=0.6, pad=0.2, aspect=40)
        bar.set_label("accuracy difference to the original (points)", fontsize=8)
        bar.ax.tick_params(labelsize=7)
    numbers = {id(c): i for i, c in enumerate(cells, start=1)}
    for ax, (y, _) in zip(axes, panels, strict=True):
        shown = _shown(cells, y)
        points = [(c.bytes / 1e6, getattr(c, y)) for c in shown]
        _number_points(fig, ax, points, [numbers[id(c)] for c in shown])
    _key(key_ax, axes, cells, columns)
    return fig


def _key(key_ax: Any, axes: list[Any], cells: list[Cell], columns: int) -> None:
    """The key in its own axes right of the panels: the plot's lines, then one line per cell."""
    from matplotlib.lines import Line2D

    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    blank = Line2D([], [], linestyle="none")
    key = [f"{i}  {describe(c)}" for i, c in enumerate(cells, start=1)]
    key_ax.legend(
        list(handles.values()) + [blank] * len(key),
        list(handles) + key,
        loc="upper left",
        bbox_to_anchor=(0.0, 1.0),
        fontsize=7,
        ncol=columns,
        handlelength=1.5,
        frameon=False,
        borderaxespad=0.0,
    )


def _pyplot() -> Any:
    """pyplot on the Agg backend; the bench extra named if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("bench plot", "bench", "matplotlib") from e
    return plt


def save_plot(report: BenchReport, path: str) -> None:
    """Size against write time (and loader records/s with ``--read``), to ``path``."""
    plt = _pyplot()
    fig = figure(report)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
