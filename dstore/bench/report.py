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
    ("probe_s", "probe s"),
    ("note", "note"),
]


def _fmt_size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def recommend(report: BenchReport, objective: str, max_drop: float) -> tuple[Cell | None, str]:
    """Best cell by ``objective`` among those losing at most ``max_drop`` accuracy points.

    When no accuracy was measured (no labels, no evaluation function), nothing says
    what a lossy cast costs, so only bit-exact cells are candidates.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}. Got {objective!r}.")
    key, word = OBJECTIVES[objective]
    ok = [c for c in report.cells if c.error is None]
    measured = not math.isnan(report.baseline_accuracy)
    if measured:
        ok = [c for c in ok if not math.isnan(c.accuracy_delta) and c.accuracy_delta >= -max_drop]
    else:
        ok = [c for c in ok if c.bit_exact]
    if not ok:
        return None, (
            "no configuration met the accuracy bound"
            if measured
            else "no lossless configuration succeeded; no accuracy measured, "
            "lossy casts not considered"
        )
    best = min(ok, key=lambda c: (getattr(c, key), c.bytes))
    if measured:
        reason = f"{word} of {len(ok)} configurations that lose at most {max_drop} accuracy points"
        reason += f" (this one: {best.accuracy_delta:+.2f} pts"
        reason += ", within the probe's noise)" if best.within_noise else ")"
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
    return best, reason


def table_rows(report: BenchReport) -> list[dict[str, str]]:
    rows = []
    for c in report.cells:
        note = c.error or ("" if c.within_noise in (None, True) else "outside noise")
        if (
            c.within_noise
            and not c.bit_exact
            and not math.isnan(c.accuracy_delta)
            and c.accuracy_delta != 0
        ):
            note = "within noise"
        rows.append(
            {
                "format": c.label,
                "dtype": c.dtype,
                "size": _fmt_size(c.bytes) if c.bytes else "-",
                "ratio": f"{c.ratio:.2f}" if c.bytes else "-",
                "B/rec": f"{c.bytes_per_record:,.0f}" if c.bytes else "-",
                "write_s": f"{c.write_s:.2f}" if not math.isnan(c.write_s) else "-",
                "read_s": f"{c.read_s:.2f}" if not math.isnan(c.read_s) else "-",
                "peak_mb": f"{c.peak_write_mb:.0f}" if not math.isnan(c.peak_write_mb) else "-",
                "max_abs": f"{c.max_abs_error:.2g}" if c.bytes else "-",
                "exact": "yes" if c.bit_exact else ("no" if c.bytes else "-"),
                "acc": f"{100 * c.accuracy:.2f}" if not math.isnan(c.accuracy) else "-",
                "delta": f"{c.accuracy_delta:+.2f}" if not math.isnan(c.accuracy_delta) else "-",
                "probe_s": f"{c.probe_s:.2f}" if not math.isnan(c.probe_s) else "-",
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
            f"probe: logistic regression on {report.task.features!r} -> {report.task.labels!r}, "
            f"train {report.task.train!r}, test {test!r}; original data: "
            f"{100 * report.baseline_accuracy:.2f}% in {report.baseline_probe_s:.2f} s "
            f"(noise +/- {report.noise_points:.2f} pts)"
        )
    elif not math.isnan(report.baseline_accuracy):
        lines.append(f"user evaluation on the original data: {report.baseline_accuracy:.4g}")
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
    for k, v in best.options.items():
        command += ["-o", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    return f"recommendation: {best.label} {best.dtype} ({report.reason}); {shlex.join(command)}"


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


def to_json(report: BenchReport) -> dict[str, Any]:
    def clean(v: Any) -> Any:
        if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    cells = []
    for c in report.cells:
        d = asdict(c)
        d.update(label=c.label, ratio=c.ratio, bytes_per_record=c.bytes_per_record)
        cells.append(d)
    return clean(
        {
            "source": report.source,
            "task": asdict(report.task) if report.task else None,
            "baseline_accuracy": report.baseline_accuracy,
            "baseline_probe_s": report.baseline_probe_s,
            "noise_points": report.noise_points,
            "machine": report.machine,
            "settings": report.settings,
            "cells": cells,
            "recommendation": report.recommendation.label + " " + report.recommendation.dtype
            if report.recommendation
            else None,
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
        cells = to_json(report)["cells"]
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


def pareto(cells: list[Cell]) -> list[Cell]:
    """Cells no other cell beats on both size and write time."""
    ok = [c for c in cells if c.error is None and c.bytes]
    return [
        c
        for c in ok
        if not any(
            (o.bytes <= c.bytes and o.write_s <= c.write_s)
            and (o.bytes < c.bytes or o.write_s < c.write_s)
            for o in ok
        )
    ]


def save_plot(report: BenchReport, path: str) -> None:
    """Size vs write time, accuracy delta as colour, the Pareto front joined."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        from ..errors import MissingDependencyError

        raise MissingDependencyError("bench plot", "bench", "matplotlib") from e
    cells = [c for c in report.cells if c.error is None and c.bytes]
    fig, ax = plt.subplots(figsize=(8, 5))
    deltas = [0.0 if math.isnan(c.accuracy_delta) else c.accuracy_delta for c in cells]
    span = max(0.1, *(abs(d) for d in deltas)) if deltas else 1
    sc = ax.scatter(
        [c.write_s for c in cells],
        [c.bytes / 1e6 for c in cells],
        c=deltas,
        cmap="RdYlGn",
        vmin=-span,
        vmax=span,
        s=60,
        edgecolors="k",
    )
    for c in cells:
        ax.annotate(
            f"{c.label} {c.dtype}",
            (c.write_s, c.bytes / 1e6),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    front = sorted(pareto(cells), key=lambda c: c.write_s)
    if front:
        ax.plot(
            [c.write_s for c in front],
            [c.bytes / 1e6 for c in front],
            "k--",
            lw=1,
            label="Pareto front",
        )
        ax.legend(loc="upper right")
    fig.colorbar(sc, ax=ax, label="accuracy delta (points)")
    ax.set_xlabel("write time (s)")
    ax.set_ylabel("size on disk (MB)")
    ax.set_title(f"dstore bench: {os.path.basename(report.source)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
