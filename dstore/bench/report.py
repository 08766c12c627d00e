"""Benchmark output: terminal table, JSON/CSV/Markdown files, a plot, and the recommendation."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shlex
from dataclasses import asdict
from typing import Any

from ..registry import default_extension
from .harness import BenchReport, Cell

__all__ = ["recommend", "save_plot", "save_report", "table_rows", "to_markdown", "to_text"]

OBJECTIVES = {
    "size": ("bytes", "smallest"),
    "write": ("write_s", "fastest to write"),
    "read": ("read_s", "fastest to read"),
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
    ("max_abs", "max abs err"),
    ("exact", "bit-exact"),
    ("acc", "accuracy"),
    ("delta", "delta pts"),
    ("band", "noise +/-"),
    ("probe_s", "train s"),
    ("probe_dtype", "trained as"),
    ("note", "note"),
]


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
    key, word = OBJECTIVES[objective]
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
    best = min(ok, key=lambda c: (getattr(c, key), c.bytes))
    if measured:
        reason = (
            f"{word} of {len(ok)} configurations that lose at most {max_drop} accuracy points "
            "or lie within noise"
        )
        reason += f" (this one: {best.accuracy_delta:+.2f} pts"
        if not math.isnan(best.band) and not best.bit_exact:
            reason += f", noise +/- {best.band:.2f}"
        reason += ")"
    else:
        reason = (
            f"{word} of {len(ok)} lossless configurations; no accuracy measured, "
            "lossy casts not considered"
        )
    reason += (
        f": {_fmt_size(best.bytes)}, {best.write_s:.2f} s to write, {best.read_s:.2f} s to read"
    )
    if not best.bit_exact:
        reason += f", max abs error {best.max_abs_error:.3g}"
    inp = report.input
    if inp is not None and inp.error is None and inp.bytes and best.bytes:
        if objective == "read" and not math.isnan(inp.read_s) and best.read_s > 0:
            reason += f"; {inp.read_s / best.read_s:.1f}x your input's read speed"
        else:
            reason += f"; {inp.bytes / best.bytes:.2f}x smaller than your input"
    return best, reason


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


def _header(report: BenchReport) -> list[str]:
    records = report.cells[0].records if report.cells else 0
    raw = _fmt_size(report.cells[0].raw_bytes) if report.cells else "0 B"
    lines = [f"dstore bench {report.source}: {records} records, {raw} raw"]
    if report.task is not None:
        test = report.task.test or f"seeded 25% hold-out of {report.task.train}"
        lines.append(
            f"probe: SGD log-loss classifier on {report.task.features!r} -> "
            f"{report.task.labels!r}, train {report.task.train!r}, test {test!r}; original data: "
            f"{100 * report.baseline_accuracy:.2f}% trained in {report.baseline_probe_s:.2f} s "
            f"as {report.probe_dtype or '?'} (noise +/- {report.noise_points:.2f} pts)"
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


def to_text(report: BenchReport) -> str:
    rows = table_rows(report)
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in COLUMNS}
    out = _header(report)
    out.append("  ".join(h.ljust(widths[k]) for k, h in COLUMNS).rstrip())
    for r in rows:
        out.append("  ".join(r[k].ljust(widths[k]) for k, _ in COLUMNS).rstrip())
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
    out = [
        *_header(report),
        "",
        "| " + " | ".join(h for _, h in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    out += ["| " + " | ".join(r[k] for k, _ in COLUMNS) + " |" for r in rows]
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
            "machine": report.machine,
            "settings": report.settings,
            "input": cell_dict(report.input) if report.input is not None else None,
            "cells": cells,
            "recommendation": _describe(report.recommendation) if report.recommendation else None,
            "reason": report.reason,
            "warnings": report.warnings,
        }
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


def save_plot(report: BenchReport, path: str) -> None:
    """Size against accuracy, the Pareto front (smaller and at least as accurate) marked.

    Without a measured accuracy, size against write time instead. The user's
    input is drawn as a star; error bars are the noise bands.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("bench plot", "bench", "matplotlib") from e
    cells = [c for c in report.cells if c.measured]
    with_accuracy = not math.isnan(report.baseline_accuracy)
    y = "accuracy" if with_accuracy else "write_s"
    scale = 100.0 if with_accuracy else 1.0

    def ys(cs: list[Cell]) -> list[float]:
        return [scale * getattr(c, y) for c in cs]

    fig, ax = plt.subplots(figsize=(8, 5))
    front = pareto(cells, y, higher_better=with_accuracy)
    rest = [c for c in cells if c not in front]
    err = [0.0 if math.isnan(c.band) else c.band for c in rest] if with_accuracy else None
    ax.errorbar(
        [c.bytes / 1e6 for c in rest], ys(rest), yerr=err, fmt="o", color="0.6", label="cells"
    )
    front.sort(key=lambda c: c.bytes)
    if front:
        ax.errorbar(
            [c.bytes / 1e6 for c in front],
            ys(front),
            yerr=[0.0 if math.isnan(c.band) else c.band for c in front] if with_accuracy else None,
            fmt="o-",
            color="tab:red",
            label="Pareto front",
        )
    inp = report.input
    if inp is not None and inp.measured and not math.isnan(getattr(inp, y)):
        ax.plot([inp.bytes / 1e6], ys([inp]), "*", ms=14, color="tab:blue", label=inp.label)
    for c in cells:
        ax.annotate(
            _describe(c),
            (c.bytes / 1e6, scale * getattr(c, y)),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.set_xscale("log")
    from matplotlib.ticker import FormatStrFormatter

    for axis in (ax.xaxis.set_major_formatter, ax.xaxis.set_minor_formatter):
        axis(FormatStrFormatter("%g"))  # 0.4, 2, 6 rather than 4x10^-1
    ax.set_xlabel("size on disk (MB, log scale)")
    ax.set_ylabel("accuracy (%)" if with_accuracy else "write time (s)")
    ax.legend(loc="lower right" if with_accuracy else "upper right", fontsize=8)
    ax.set_title(f"dstore bench: {os.path.basename(report.source)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
