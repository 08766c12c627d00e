"""Benchmark output: terminal table, JSON/CSV/Markdown files, a plot, and the recommendation."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shlex
import textwrap
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..registry import default_extension
from .accuracy import Task
from .results import BenchReport, Cell

__all__ = [
    "cell_line",
    "header_line",
    "probe_line",
    "recommend",
    "save_plot",
    "save_report",
    "table_rows",
    "to_markdown",
    "to_text",
]

#: what each goal ranks by (best first), and how the reason names the winner
OBJECTIVES = {
    "size": "smallest",
    "write": "fastest to write",
    "read": "fastest to read",
    "balanced": "best balance of size, write and read time",
}

COLUMNS = [
    ("format", "format"),
    ("images", "images"),
    ("dtype", "dtype"),
    ("size", "size"),
    ("ratio", "raw/out"),
    ("B/rec", "bytes/record"),
    ("write_s", "write s"),
    ("read_s", "read s"),
    ("peak_mb", "write peak RSS MB"),
    ("loader", "loader rec/s"),
    ("loader_mb", "loader MB/s"),
    ("cold", "cold rec/s"),
    ("max_abs", "max abs err"),
    ("exact", "bit-exact"),
    ("acc", "accuracy"),
    ("delta", "delta pts"),
    ("band", "noise +/-"),
    ("probe_s", "train s"),
    ("probe_dtype", "trained as"),
    ("note", "note"),
]
#: Columns that exist only when accuracy was measured.
ACCURACY_COLUMNS = ("acc", "delta", "band", "probe_s", "probe_dtype")
#: Columns that exist only with --read (a training loader was measured).
LOADER_COLUMNS = ("loader", "loader_mb", "cold")
#: The terminal table's width unless ``wide``.
TABLE_WIDTH = 120
#: The narrow table (``wide=False``): shorter headings; bytes/record, the writer's peak
#: memory, the probe's training time and dtype (in the header line) are left out.
NARROW = {
    "format": "format",
    "images": "images",
    "dtype": "dtype",
    "size": "size",
    "ratio": "raw/out",
    "write_s": "write s",
    "read_s": "read s",
    "loader": "rec/s",
    "max_abs": "max err",
    "exact": "exact",
    "acc": "acc %",
    "delta": "delta",
    "band": "+/-",
    "note": "note",
}
#: What the narrow table drops first when a row still does not fit (long --grid labels).
NARROW_DROP = ("ratio", "exact", "band", "images")
#: A note narrower than this goes below the table as a numbered footnote.
MIN_NOTE = 16


def _fmt_size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def acceptable(cell: Cell, max_drop: float) -> bool:
    """May ``cell`` be recommended when accuracy was measured?

    Bit-exact cells always; a lossy cell only with a noise band (else its
    difference cannot be judged), and then when it loses at most ``max_drop``
    points or its difference is within the band -- so a wobble of noise does
    not flip the recommendation either way.
    """
    if cell.bit_exact:
        return True
    if math.isnan(cell.accuracy_delta) or cell.within_noise is None:
        return False
    return cell.accuracy_delta >= -max_drop or cell.within_noise


def recommend(report: BenchReport, objective: str, max_drop: float) -> tuple[Cell | None, str]:
    """Best cell by ``objective`` among those :func:`acceptable` (never the input row).

    When no accuracy was measured (no labels, no evaluation function), nothing says
    what a lossy cast costs, so only bit-exact cells are candidates.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}. Got {objective!r}.")
    ok = [c for c in report.cells if c.error is None and c.unsupported is None and not c.is_input]
    measured = not math.isnan(report.baseline_accuracy)
    ok = [c for c in ok if acceptable(c, max_drop)] if measured else [c for c in ok if c.bit_exact]
    if not ok:
        return None, (
            "no configuration met the accuracy bound"
            if measured
            else "no lossless configuration succeeded; no accuracy measured, "
            "lossy casts not considered"
        )
    best = min(ok, key=_ranking(objective, ok))
    return best, _why(report, best, objective, max_drop, len(ok), measured)


def _why(
    report: BenchReport, best: Cell, objective: str, max_drop: float, among: int, measured: bool
) -> str:
    """Why :func:`recommend` chose ``best`` of ``among`` candidates: the rule, then its figures."""
    word = OBJECTIVES[objective]
    if measured:
        reason = (
            f"{word} of {among} configurations that lose at most {max_drop} accuracy points "
            "or lie within noise"
        )
        reason += f" (this one: {best.accuracy_delta:+.2f} pts"
        if not math.isnan(best.band) and not best.bit_exact:
            reason += f", noise +/- {best.band:.2f}"
        reason += ")"
    else:
        reason = (
            f"{word} of {among} lossless configurations; no accuracy measured, "
            "lossy casts not considered"
        )
    reason += (
        f": {_fmt_size(best.bytes)}, {best.write_s:.2f} s to write, {best.read_s:.2f} s to read"
    )
    if not math.isnan(best.loader_rps):
        reason += (
            f", {best.loader_rps:,.0f} records/s through the {report.settings['loader']} loader"
        )
    if not best.bit_exact:
        reason += f", max abs error {best.max_abs_error:.3g}"
    return reason + _against_input(report.input, best, objective)


def _against_input(inp: Cell | None, best: Cell, objective: str) -> str:
    """``best`` against the user's input, by the objective's measure ("" when unknown)."""
    if inp is None or inp.error is not None or not inp.bytes or not best.bytes:
        return ""
    if objective == "read" and _loaded(best) and _loaded(inp):
        return f"; {best.loader_rps / inp.loader_rps:.1f}x your input's loader speed"
    if objective == "read" and not math.isnan(inp.read_s) and best.read_s > 0:
        return f"; {inp.read_s / best.read_s:.1f}x your input's read speed"
    return f"; {inp.bytes / best.bytes:.2f}x smaller than your input"


def _loaded(c: Cell) -> bool:
    return not math.isnan(c.loader_rps) and c.loader_rps > 0


def _read_cost(c: Cell) -> float:
    """Seconds per record: the training loader's where measured, else one process's read."""
    if _loaded(c):
        return 1 / c.loader_rps
    return c.read_s / c.records if c.records else c.read_s


def _ranking(objective: str, cells: list[Cell]) -> Callable[[Cell], tuple[float, int]]:
    """Sort key for ``objective`` (smaller is better, ties to the smaller file).

    ``balanced``: the geometric mean of size, write time and read cost, each
    relative to the best candidate's, so no unit dominates."""
    if objective == "size":
        return lambda c: (float(c.bytes), c.bytes)
    if objective == "write":
        return lambda c: (c.write_s, c.bytes)
    if objective == "read":
        return lambda c: (_read_cost(c), c.bytes)
    floor = {
        "bytes": min(c.bytes for c in cells) or 1,
        "write": min(c.write_s for c in cells) or 1e-9,
        "read": min(_read_cost(c) for c in cells) or 1e-9,
    }

    def balanced(c: Cell) -> tuple[float, int]:
        parts = (
            c.bytes / floor["bytes"],
            c.write_s / floor["write"],
            _read_cost(c) / floor["read"],
        )
        return (math.prod(parts) ** (1 / 3), c.bytes)

    return balanced


def _note(c: Cell) -> str:
    if c.unsupported:
        return f"not supported: {c.unsupported}"
    if c.error:
        return c.error
    if c.is_input:
        return "your input as it is (baseline)"
    if c.bit_exact or math.isnan(c.accuracy_delta):
        return ""
    if c.within_noise is None:
        return "cannot be judged (no noise band)"
    if c.within_noise:
        return "within noise" if c.accuracy_delta != 0 else ""
    return "outside noise"


def _num(v: float, fmt: str) -> str:
    return "-" if math.isnan(v) else format(v, fmt)


def table_rows(report: BenchReport) -> list[dict[str, str]]:
    """One row per cell, the user's input first."""
    rows = []
    cells = ([report.input] if report.input is not None else []) + list(report.cells)
    for c in cells:
        note = _note(c)
        has = bool(c.bytes) and not c.unsupported
        rows.append(
            {
                "format": c.label,
                "images": c.images,
                "dtype": c.dtype,
                "size": _fmt_size(c.bytes) if has else "-",
                "ratio": f"{c.ratio:.2f}" if has else "-",
                "B/rec": f"{c.bytes_per_record:,.0f}" if has else "-",
                "write_s": _num(c.write_s, ".2f"),
                "read_s": _num(c.read_s, ".2f"),
                "peak_mb": _num(c.peak_write_mb, ".0f"),
                "loader": _num(c.loader_rps, ",.0f"),
                "loader_mb": _num(c.loader_mbps, ".1f"),
                "cold": _num(c.loader_cold_rps, ",.0f"),
                "max_abs": f"{c.max_abs_error:.2g}" if has else "-",
                "exact": "yes" if c.bit_exact and has else ("no" if has else "-"),
                "acc": _num(100 * c.accuracy, ".2f"),
                "delta": _num(c.accuracy_delta, "+.2f"),
                "band": _num(c.band, ".2f"),
                "probe_s": _num(c.probe_s, ".2f"),
                "probe_dtype": c.probe_dtype or "-",
                "note": note.splitlines()[0] if note else "",
            }
        )
    return rows


def header_line(source: str, records: int, raw_bytes: int) -> str:
    """The report's first line, also the first progress line."""
    return f"dstore bench {source}: {records} records, {_fmt_size(raw_bytes)} raw"


#: What each probe learns and how it is scored (see dstore.bench.accuracy).
_PROBE_WHAT = {
    "classification": "SGD log-loss classifier on {f!r} -> {y!r}, scored by accuracy",
    "detection": "which classes have a box in {y!r}, one SGD log-loss classifier per class "
    "on image features of {f!r}, scored by the Jaccard index of each tile's class set",
    "segmentation": "the class in {y!r} of sampled pixels, SGD log-loss on their colour, "
    "5x5 neighbourhood and position in {f!r}, scored by pixel accuracy",
}


def probe_line(task: Task | None, score: float, chance: float, noise: float, seconds: float) -> str:
    """One line: the original data's score (progress, and the report's header)."""
    name = task.probe if task is not None else "evaluate"
    value = f"{100 * score:.2f}%" if task is not None else f"{score:.4g}"
    guess = f" (constant guess {100 * chance:.2f}%)" if not math.isnan(chance) else ""
    band = f", noise +/- {noise:.2f} pts" if not math.isnan(noise) else ""
    return f"probe: {name}: original data {value}{guess}, {seconds:.2f} s{band}"


def cell_line(cell: Cell, i: int, total: int) -> str:
    """One progress line per finished cell: what it measured, or why it could not."""
    head = f"[{i}/{total}] {_describe(cell) if not cell.is_input else cell.label}"
    if cell.unsupported:
        return f"{head}: not supported: {cell.unsupported}"
    if cell.error:
        return f"{head}: {cell.error.splitlines()[0]}"
    parts = [_fmt_size(cell.bytes)]
    if not math.isnan(cell.write_s):
        parts.append(f"write {cell.write_s:.2f} s")
    parts.append(f"read {_num(cell.read_s, '.2f')} s")
    if not math.isnan(cell.loader_rps):
        parts.append(f"loader {cell.loader_rps:,.0f} records/s")
    if not math.isnan(cell.accuracy):
        parts.append(f"accuracy {100 * cell.accuracy:.2f}%")
        if not cell.is_input:
            parts.append(f"delta {cell.accuracy_delta:+.2f} pts")
    return f"{head}: {', '.join(parts)}"


def _header(report: BenchReport) -> list[str]:
    records = report.cells[0].records if report.cells else 0
    raw = report.cells[0].raw_bytes if report.cells else 0
    lines = [header_line(report.source, records, raw)]
    if report.task is not None:
        task = report.task
        test = task.test or f"seeded 25% hold-out of {task.train}"
        what = _PROBE_WHAT[task.kind].format(f=task.features, y=task.labels)
        detail = f"; {report.probe_detail}" if report.probe_detail else ""
        lines.append(f"probe: {task.probe}: {what}{detail}")
        guess = (
            f" (constant guess {100 * report.chance:.2f}%)" if not math.isnan(report.chance) else ""
        )
        lines.append(
            f"  train {task.train!r}, test {test!r}; original data "
            f"{100 * report.baseline_accuracy:.2f}%{guess}, trained in "
            f"{report.baseline_probe_s:.2f} s as {report.probe_dtype or '?'} "
            f"(noise +/- {report.noise_points:.2f} pts)"
        )
    elif not math.isnan(report.baseline_accuracy):
        band = (
            f" (noise +/- {report.noise_points:.2f} pts)"
            if not math.isnan(report.noise_points)
            else " (no noise band: differences cannot be judged)"
        )
        lines.append(f"user evaluation on the original data: {report.baseline_accuracy:.4g}{band}")
    lines.extend(report.warnings)
    return lines


def _columns(report: BenchReport, wide: bool) -> list[tuple[str, str]]:
    """The table's (key, heading) pairs: all, or the narrow set; no accuracy columns
    when no accuracy was measured (--no-probe, no labels)."""
    cols = COLUMNS if wide else [(k, NARROW[k]) for k, _ in COLUMNS if k in NARROW]
    if math.isnan(report.baseline_accuracy):
        cols = [(k, h) for k, h in cols if k not in ACCURACY_COLUMNS]
    if not report.settings.get("loader"):
        cols = [(k, h) for k, h in cols if k not in LOADER_COLUMNS]
    return list(cols)


def _fit(
    rows: list[dict[str, str]], cols: list[tuple[str, str]], width: int
) -> tuple[list[tuple[str, str]], int]:
    """Drop :data:`NARROW_DROP` columns until the others leave a note of MIN_NOTE
    characters within ``width``; the room the note gets."""

    def used(cs: list[tuple[str, str]]) -> int:
        fixed = [max(len(h), *(len(r[k]) for r in rows)) for k, h in cs if k != "note"]
        return sum(fixed) + 2 * len(fixed)

    for key in NARROW_DROP:
        if used(cols) + MIN_NOTE <= width:
            break
        cols = [c for c in cols if c[0] != key]
    return cols, max(width - used(cols), len("note"))


def _footnoted(rows: list[dict[str, str]], room: int) -> list[str]:
    """Notes longer than ``room`` become ``[n]`` in the row and a numbered line below
    the table (one per distinct note), so no row is cut and none runs past the width."""
    notes: list[str] = []
    for r in rows:
        if len(r["note"]) > room:
            if r["note"] not in notes:
                notes.append(r["note"])
            r["note"] = f"[{notes.index(r['note']) + 1}]"
    return notes


def to_text(report: BenchReport, wide: bool = False, width: int = TABLE_WIDTH) -> str:
    """The terminal report. The table fits ``width`` columns (long notes become
    footnotes, less important columns are left out) unless ``wide``: every column,
    each note in its row."""
    rows = table_rows(report)
    cols = _columns(report, wide)
    notes: list[str] = []
    if not wide and rows:
        if report.input is not None and rows[0]["note"] == _note(report.input):
            rows[0]["note"] = "baseline"  # "your input as it is (baseline)": the row says so
        cols, room = _fit(rows, cols, width)
        notes = _footnoted(rows, room)
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in cols}
    out = _header(report)
    if not wide:  # the probe's description and warnings: wrapped, as the table fits
        out = [
            part
            for line in out
            for part in textwrap.wrap(
                line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
            )
            or [""]
        ]
    out.append("  ".join(h.ljust(widths[k]) for k, h in cols).rstrip())
    for r in rows:
        out.append("  ".join(r[k].ljust(widths[k]) for k, _ in cols).rstrip())
    for i, note in enumerate(notes, start=1):
        out.extend(
            textwrap.wrap(
                note,
                width,
                initial_indent=f"[{i}] ",
                subsequent_indent="    ",
                break_long_words=False,
            )
        )
    out.append(_recommendation_line(report))
    return "\n".join(out)


def _recommendation_line(report: BenchReport) -> str:
    best = report.recommendation
    if best is None:
        return f"recommendation: none ({report.reason})"
    command = ["dstore", "convert", report.source, f"out{default_extension(best.format)}"]
    if best.dtype != "keep":
        command += ["--dtype", best.dtype]
    for k, v in best.write_options.items():
        command += ["-o", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    what = _describe(best)
    return f"recommendation: {what} ({report.reason}); {shlex.join(command)}"


def to_markdown(report: BenchReport) -> str:
    rows = table_rows(report)
    cols = _columns(report, wide=True)
    out = [
        *_header(report),
        "",
        "| " + " | ".join(h for _, h in cols) + " |",
        "|" + "---|" * len(cols),
    ]
    out += ["| " + " | ".join(r[k] for k, _ in cols) + " |" for r in rows]
    out += ["", _recommendation_line(report)]
    return "\n".join(out)


def _describe(c: Cell) -> str:
    if c.images in ("png", "-"):  # the lossless default, or no image field at all
        return f"{c.label} {c.dtype}"
    return f"{c.label} {c.images} {c.dtype}"


def to_json(report: BenchReport) -> dict[str, Any]:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    def cell_dict(c: Cell) -> dict[str, Any]:
        d = asdict(c)
        d.update(label=c.label, ratio=c.ratio, bytes_per_record=c.bytes_per_record)
        return d

    cells = [cell_dict(c) for c in report.cells]
    return clean(
        {
            "source": report.source,
            "task": asdict(report.task) if report.task else None,
            "baseline_accuracy": report.baseline_accuracy,
            "baseline_probe_s": report.baseline_probe_s,
            "noise_points": report.noise_points,
            "probe_dtype": report.probe_dtype,
            "probe": report.probe or None,
            "probe_detail": report.probe_detail,
            "chance": report.chance,
            "machine": report.machine,
            "settings": report.settings,
            "input": cell_dict(report.input) if report.input is not None else None,
            "cells": cells,
            "recommendation": _describe(report.recommendation) if report.recommendation else None,
            "reason": report.reason,
            "warnings": report.warnings,
        }
    )


#: Cell fields that hold accuracy (left out of a CSV when none was measured).
_CELL_ACCURACY_FIELDS = (
    "accuracy",
    "accuracy_delta",
    "probe_s",
    "probe_dtype",
    "band",
    "within_noise",
)


def save_report(report: BenchReport, path: str) -> None:
    """Write ``.json``, ``.csv`` or ``.md`` by extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".json":
        text = json.dumps(to_json(report), indent=1)
    elif ext == ".csv":
        buf = io.StringIO()
        data = to_json(report)
        cells = ([data["input"]] if data["input"] else []) + data["cells"]  # input row first
        # which probe ran, on every row (a CSV has no header lines); no accuracy measured:
        # no accuracy columns, as in the table
        drop = set() if data["probe"] else {*_CELL_ACCURACY_FIELDS}
        cells = [
            {"probe": data["probe"] or "", **{k: v for k, v in c.items() if k not in drop}}
            for c in cells
        ]
        writer = csv.DictWriter(buf, fieldnames=list(cells[0]) if cells else ["format"])
        writer.writeheader()
        for c in cells:
            writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in c.items()})
        text = buf.getvalue()
    elif ext in (".md", ".markdown"):
        text = to_markdown(report)
    else:
        raise ValueError(f"report file must end in .json, .csv or .md. Got {path!r}.")
    with open(path, "w") as f:
        f.write(text + ("\n" if not text.endswith("\n") else ""))


def pareto(cells: list[Cell], y: str = "write_s", higher_better: bool = False) -> list[Cell]:
    """Cells no other cell beats on both size and ``y`` (lower is better unless told)."""
    ok = [c for c in cells if c.measured and not math.isnan(getattr(c, y))]

    def better(o: Cell, c: Cell) -> bool:
        oy, cy = getattr(o, y), getattr(c, y)
        if higher_better:
            oy, cy = -oy, -cy
        return o.bytes <= c.bytes and oy <= cy and (o.bytes < c.bytes or oy < cy)

    return [c for c in ok if not any(better(o, c) for o in ok)]


#: Candidate offsets (points) of a cell's number from its marker: nearest first, all round.
_OFFSETS = [
    (r * dx, r * dy)
    for r in (5, 9, 14, 20, 28, 38, 50, 65, 85, 110)
    for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (0, 1), (-1, 0), (0, -1))
]
#: Markers closer than this (pixels) share one label ("3,4"): equal cells coincide.
_SAME_SPOT = 6.0


def _overlaps(a: Any, b: Any, pad: float = 1.0) -> bool:
    return bool(a.x0 < b.x1 + pad and b.x0 < a.x1 + pad and a.y0 < b.y1 + pad and b.y0 < a.y1 + pad)


def _number_points(fig: Any, ax: Any, points: list[tuple[float, float]]) -> list[bool]:
    """Write each point's number (1, 2, ...) beside it, no two numbers overlapping.

    Points on the same spot share one label ("3,4"). Each label takes the first
    offset of :data:`_OFFSETS` that overlaps no label placed before and, if one does,
    no marker, inside the axes. Returns per point whether it got a label: one with no
    room anywhere (never seen in practice) is left to the key alone.
    """
    from matplotlib.transforms import Bbox

    fig.canvas.draw()  # fixes the limits, so data -> pixel transforms hold from here
    renderer = fig.canvas.get_renderer()
    pix = [tuple(ax.transData.transform(p)) for p in points]
    markers = [Bbox.from_extents(x - 4, y - 4, x + 4, y + 4) for x, y in pix]
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = []
    labelled = [False] * len(points)
    for group in _same_spots(pix):
        text = ",".join(str(i + 1) for i in group)
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
        for i in group:
            labelled[i] = True
    return labelled


def _same_spots(pix: list[tuple[float, ...]]) -> list[list[int]]:
    """The points grouped by spot: those within :data:`_SAME_SPOT` pixels of a group's first."""
    groups: list[list[int]] = []
    for i, (x, y) in enumerate(pix):
        near = next(
            (g for g in groups if math.dist(pix[g[0]], (x, y)) <= _SAME_SPOT),
            None,
        )
        if near is None:
            groups.append([i])
        else:
            near.append(i)
    return groups


def _free_offset(
    label: Any, renderer: Any, frame: Any, placed: list[Any], markers: list[Any]
) -> tuple[float, float] | None:
    """The first offset of :data:`_OFFSETS` where ``label`` is inside the axes, overlaps no
    label ``placed`` and, if one does, no marker; None when none is inside and free."""
    fallback = None
    for offset in _OFFSETS:
        label.set_position(offset)
        box = label.get_window_extent(renderer)
        inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
        if not inside or box.y1 > frame.y1 or any(_overlaps(box, b) for b in placed):
            continue
        if not any(_overlaps(box, m, 0.0) for m in markers):
            return offset
        fallback = fallback or offset
    return fallback


def _figure(report: BenchReport) -> Any:
    """The plot of :func:`save_plot` as a matplotlib figure."""
    plt, Line2D, FormatStrFormatter = _pyplot()
    cells = [c for c in report.cells if c.measured]
    with_accuracy = not math.isnan(report.baseline_accuracy)
    y = "accuracy" if with_accuracy else "write_s"
    scale = 100.0 if with_accuracy else 1.0
    fig, ax = plt.subplots(figsize=(8, 5))
    handles = _plot_cells(ax, report, cells, y, scale)
    ax.set_xscale("log")
    for axis in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
        axis(FormatStrFormatter("%g"))  # 0.4, 2, 6 rather than 4x10^-1
    ax.set_xlabel("size on disk (MB, log scale)")
    ax.set_ylabel("accuracy (%)" if with_accuracy else "write time (s)")
    probe = f", probe: {report.probe}" if report.probe else ""
    ax.set_title(f"dstore bench: {os.path.basename(report.source)}{probe}", fontsize=10)
    # Numbers beside the markers and a key beside the axes: text beside each point
    # overlapped wherever cells of equal size and accuracy met (every lossless cell).
    labelled = _number_points(fig, ax, [(c.bytes / 1e6, scale * getattr(c, y)) for c in cells])
    blank = Line2D([], [], linestyle="none")
    key = [
        f"{i}  {_describe(c)}" + ("" if ok else " (no room for its number)")
        for i, (c, ok) in enumerate(zip(cells, labelled, strict=True), start=1)
    ]
    ax.legend(
        handles + [blank] * len(key),
        [str(h.get_label()) for h in handles] + key,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        fontsize=7,
        ncol=max(1, math.ceil((len(handles) + len(key)) / 30)),
        handlelength=1.5,
        frameon=False,
    )
    return fig


def _pyplot() -> tuple[Any, Any, Any]:
    """pyplot (on the Agg backend), Line2D and FormatStrFormatter; the bench extra if missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.ticker import FormatStrFormatter
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("bench plot", "bench", "matplotlib") from e
    return plt, Line2D, FormatStrFormatter


def _plot_cells(ax: Any, report: BenchReport, cells: list[Cell], y: str, scale: float) -> list[Any]:
    """The cells (grey), the Pareto front (red, joined) and the input (a star), with
    noise bands as error bars where accuracy was measured; their legend handles."""
    with_accuracy = y == "accuracy"

    def ys(cs: list[Cell]) -> list[float]:
        return [scale * getattr(c, y) for c in cs]

    def bands(cs: list[Cell]) -> list[float] | None:
        return [0.0 if math.isnan(c.band) else c.band for c in cs] if with_accuracy else None

    front = pareto(cells, y, higher_better=with_accuracy)
    rest = [c for c in cells if c not in front]
    handles: list[Any] = [
        ax.errorbar(
            [c.bytes / 1e6 for c in rest],
            ys(rest),
            yerr=bands(rest),
            fmt="o",
            color="0.6",
            label="cells",
        )
    ]
    front.sort(key=lambda c: c.bytes)
    if front:
        handles.append(
            ax.errorbar(
                [c.bytes / 1e6 for c in front],
                ys(front),
                yerr=bands(front),
                fmt="o-",
                color="tab:red",
                label="Pareto front",
            )
        )
    inp = report.input
    if inp is not None and inp.measured and not math.isnan(getattr(inp, y)):
        handles += ax.plot(
            [inp.bytes / 1e6], ys([inp]), "*", ms=14, color="tab:blue", label=inp.label
        )
    return handles


def save_plot(report: BenchReport, path: str) -> None:
    """Size against accuracy, the Pareto front (smaller and at least as accurate) marked.

    Without a measured accuracy, size against write time instead. The user's
    input is drawn as a star; error bars are the noise bands. Each cell is a number
    beside its marker (cells on one spot share a label, no two labels overlap) and
    a line of the key beside the axes.
    """
    import matplotlib.pyplot as plt

    fig = _figure(report)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
