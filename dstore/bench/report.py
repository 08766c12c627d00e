"""Benchmark output: progress lines, the terminal table, JSON/CSV/Markdown files.

One table, with a legend that defines what its columns hold (the one noise figure
among them); what was not measured and why, one line each; the recommendation in
at most three lines (:mod:`.recommend`). The plot is :mod:`.plot`'s.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import textwrap
from dataclasses import asdict
from typing import Any

from .recommend import describe, recommendation_lines
from .results import BenchReport, Cell
from .text import fit_columns, fmt_size, footnoted, num

__all__ = [
    "header_line",
    "save_report",
    "table_rows",
    "to_json",
    "to_markdown",
    "to_text",
]

#: (key, heading in the wide table, heading in the narrow one or None: wide only)
COLUMNS = [
    ("format", "format", "format"),
    ("images", "images", "images"),
    ("dtype", "dtype", "dtype"),
    ("size", "size", "size"),
    ("ratio", "raw/out", "raw/out"),
    ("B/rec", "bytes/record", None),
    ("write_s", "write s", "write s"),
    ("read_s", "read s", "read s"),
    ("peak_mb", "write peak RSS MB", None),
    ("loader", "loader rec/s", "rec/s"),
    ("shuffled", "shuffled rec/s", "shuf rec/s"),
    ("quality", "shuffle quality", "shuffle"),
    ("loader_mb", "loader MB/s", None),
    ("cold", "cold rec/s", None),
    ("max_abs", "max err", "max err"),
    ("exact", "exact", "exact"),
    ("acc", "accuracy %", "acc %"),
    ("delta", "delta pts", "delta"),
    ("band", "+/- pts", "+/-"),
    ("probe_s", "train s", "train s"),
    ("probe_dtype", "trained as", None),
    ("spread", "95% interval", None),
    ("note", "note", "note"),
]
ACCURACY_COLUMNS = ("acc", "delta", "band", "probe_s", "probe_dtype")
LOADER_COLUMNS = ("loader", "shuffled", "quality", "loader_mb", "cold")
#: The terminal table's width unless ``wide``.
TABLE_WIDTH = 120
#: What the narrow table drops first when a row still does not fit.
NARROW_DROP = ("ratio", "exact", "read_s", "probe_s")


def _note(c: Cell) -> str:
    if c.unsupported:
        return f"not supported: {c.unsupported}"
    if c.error:
        return c.error
    if c.is_input:  # and why its loader has no shuffled figure, when it has none
        why = f"; no shuffle: {c.shuffle_note}" if c.shuffle_note else ""
        return f"your input as it is{why}"
    notes = []
    if c.differs:
        notes.append(c.differs)
    if not c.exact and not math.isnan(c.accuracy_delta):
        if c.within_noise is None:
            notes.append("cannot be judged (no noise band)")
        elif not c.within_noise:
            notes.append("outside noise")
    if c.shuffle_note:
        notes.append(f"no shuffle: {c.shuffle_note}")
    return "; ".join(notes)


def _spread(c: Cell) -> str:
    parts = [
        f"{k.removesuffix('_s')} {c.spread(k):.0%}"
        for k in ("bytes", "write_s", "read_s")
        if k in c.intervals
    ]
    return "+/- " + ", ".join(parts) if parts else "-"


def table_rows(report: BenchReport) -> list[dict[str, str]]:
    """One row per cell, the user's input first."""
    rows = []
    for c in ([report.input] if report.input is not None else []) + list(report.cells):
        has = bool(c.bytes) and not c.unsupported and not c.error
        rows.append(
            {
                "format": c.label,
                "images": c.stored or c.images,
                "dtype": c.dtype,
                "size": fmt_size(c.bytes) if has else "-",
                "ratio": f"{c.ratio:.2f}" if has else "-",
                "B/rec": f"{c.bytes_per_record:,.0f}" if has else "-",
                "write_s": num(c.write_s, ".2f"),
                "read_s": num(c.read_s, ".2f"),
                "peak_mb": num(c.peak_write_mb, ".0f"),
                "loader": num(c.loader_rps, ",.0f"),
                "shuffled": num(c.shuffled_rps, ",.0f"),
                "quality": num(c.shuffle_quality, ".2f"),
                "loader_mb": num(c.loader_mbps, ".1f"),
                "cold": num(c.loader_cold_rps, ",.0f"),
                "max_abs": ("0" if c.exact else f"{c.max_abs_error:.2g}")
                if has and not c.is_input
                else "-",
                "exact": ("yes" if c.exact else "no") if has and not c.is_input else "-",
                "acc": num(100 * c.accuracy, ".2f"),
                "delta": num(c.accuracy_delta, "+.2f"),
                "band": num(c.band, ".2f"),
                "probe_s": num(c.probe_s, ".2f"),
                "probe_dtype": c.probe_dtype or "-",
                "spread": _spread(c),
                "note": (_note(c).splitlines() or [""])[0],
            }
        )
    return rows


def header_line(source: str, records: int, raw_bytes: int) -> str:
    return f"dstore bench {source}: {records:,} records, {fmt_size(raw_bytes)} raw"


#: What each probe learns and how it is scored (see dstore.bench.probe).
_PROBE_WHAT = {
    "classification": "SGD log-loss classifier on {f!r} -> {y!r}, scored by accuracy",
    "detection": "which classes have a box in {y!r}, one SGD log-loss classifier per class "
    "on image features of {f!r}, scored by the Jaccard index of each tile's class set",
    "segmentation": "the class in {y!r} of sampled pixels, SGD log-loss on their colour, "
    "5x5 neighbourhood and position in {f!r}, scored by pixel accuracy",
}


def _header(report: BenchReport) -> list[str]:
    inp = report.input
    records = inp.records if inp else (report.cells[0].records if report.cells else 0)
    raw = inp.raw_bytes if inp else (report.cells[0].raw_bytes if report.cells else 0)
    lines = [header_line(report.source, records, raw)]
    if report.task is not None:
        task = report.task
        test = task.test or f"a seeded 25% hold-out of {task.train}"
        what = _PROBE_WHAT[task.kind].format(f=task.features, y=task.labels)
        detail = f"; {report.probe_detail}" if report.probe_detail else ""
        lines.append(f"probe: {task.probe}: {what}{detail}")
        guess = (
            f" (constant guess {100 * report.chance:.2f}%)" if not math.isnan(report.chance) else ""
        )
        used = f" ({report.probe_records})" if report.probe_records else ""
        lines.append(
            f"  train {task.train!r}, test {test!r}{used}; original data "
            f"{100 * report.baseline_accuracy:.2f}%{guess}, trained in "
            f"{report.baseline_probe_s:.2f} s as {report.probe_dtype or '?'}"
        )
    elif not math.isnan(report.baseline_accuracy):
        lines.append(f"user evaluation on the original data: {report.baseline_accuracy:.4g}")
    if report.sample:
        lines.append(report.sample)
    lines.extend(report.warnings)
    lines.extend(report.skipped)
    if not report.complete:
        lines.append(f"partial: {len(report.cells)} of {report.planned} cells measured so far")
    return lines


def _legend(report: BenchReport, keys: set[str]) -> list[str]:
    """What the columns hold: one line each for those that need it."""
    out = [
        "images: what each cell stores (PNG, JPEG q90, or raw pixels + the format's compressor)"
        if _has_images(report)
        else "compression: what compresses each cell's arrays (-: none of its own)",
        "exact: every value read back equal to the original's; max err: the largest "
        "absolute difference (pixel levels, feature units)"
        if "exact" in keys
        else "max err: the largest absolute difference (pixel levels, feature units); 0: "
        "every value read back equal to the original's",
    ]
    if "band" in keys:
        out.append(
            "+/-: the noise of delta: twice the standard error of the paired difference over "
            "the test records; a delta within it cannot be told from noise"
        )
    if "probe_s" in keys:
        out.append("train s: the probe's training time on the stored dtype")
    if "loader" in keys:
        out.append(_loader_legend(report))
    spreads = [c.spread(k) for c in report.cells for k in ("bytes", "write_s", "read_s")]
    if any(spreads):
        size = max(c.spread("bytes") for c in report.cells)
        times = max(max(c.spread("write_s"), c.spread("read_s")) for c in report.cells)
        out.append(
            f"sizes and times: extrapolated from the sample, 95% intervals within +/- {size:.0%} "
            f"(sizes) and +/- {times:.0%} (times) -- per cell with --wide and in --report"
        )
    return out


def _loader_legend(report: BenchReport) -> str:
    perm = [c.permutation_quality for c in report.cells if not math.isnan(c.permutation_quality)]
    scale = f"a uniform random permutation of as many records: {perm[0]:.2f}; " if perm else ""
    return (
        "rec/s: the training loader's records/s in storage order; shuf rec/s: with "
        "shuffle='global'; shuffle: MosaicML's shuffle quality of the order the shuffled "
        f"records came in ({scale}storage order: 0)"
    )


def _columns(report: BenchReport, wide: bool) -> list[tuple[str, str]]:
    cols = [(k, w if wide else n) for k, w, n in COLUMNS if wide or n is not None]
    if math.isnan(report.baseline_accuracy):
        cols = [(k, h) for k, h in cols if k not in ACCURACY_COLUMNS]
    if not report.settings.get("loader"):
        cols = [(k, h) for k, h in cols if k not in LOADER_COLUMNS]
    if not report.sample:
        cols = [(k, h) for k, h in cols if k != "spread"]
    if not _has_images(report):  # features: what compresses them
        cols = [(k, "compression" if k == "images" else h) for k, h in cols]
    return cols  # type: ignore[return-value]


def _has_images(report: BenchReport) -> bool:
    return any(c.images != "-" for c in report.cells)


def _wrap(lines: list[str], width: int) -> list[str]:
    return [
        part
        for line in lines
        for part in textwrap.wrap(
            line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
        )
        or [""]
    ]


def to_text(report: BenchReport, wide: bool = False, width: int = TABLE_WIDTH) -> str:
    """The terminal report. The table fits ``width`` columns (long notes become
    footnotes, less important columns are left out) unless ``wide``."""
    rows = table_rows(report)
    cols = _columns(report, wide)
    notes: list[str] = []
    if not wide and rows:
        if report.input is not None:  # "your input as it is" said shortly, a reason kept
            why = report.input.shuffle_note
            rows[0]["note"] = f"baseline; no shuffle: {why}" if why else "baseline"
        cols, room = fit_columns(rows, cols, width, NARROW_DROP)
        notes = footnoted(rows, room)
    widths = {k: max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in cols}
    out = _header(report) if wide else _wrap(_header(report), width)
    out.append("  ".join(h.ljust(widths[k]) for k, h in cols).rstrip())
    out += ["  ".join(r[k].ljust(widths[k]) for k, _ in cols).rstrip() for r in rows]
    for i, note in enumerate(notes, start=1):
        out += textwrap.wrap(
            note, width, initial_indent=f"[{i}] ", subsequent_indent="    ", break_long_words=False
        )
    legend = _legend(report, {k for k, _ in cols})
    out += legend if wide else _wrap(legend, width)
    out += recommendation_lines(report)
    return "\n".join(out)


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
    out += ["", *_legend(report, {k for k, _ in cols}), "", *recommendation_lines(report)]
    return "\n".join(out)


def _clean(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _cell_dict(c: Cell) -> dict[str, Any]:
    d = asdict(c)
    d.update(label=c.label, ratio=c.ratio, bytes_per_record=c.bytes_per_record)
    return d


def to_json(report: BenchReport) -> dict[str, Any]:
    best = report.recommendation
    data = {
        "source": report.source,
        "complete": report.complete,
        "planned": report.planned,
        "task": asdict(report.task) if report.task else None,
        "baseline_accuracy": report.baseline_accuracy,
        "baseline_probe_s": report.baseline_probe_s,
        "noise_points": report.noise_points,
        "probe_dtype": report.probe_dtype,
        "probe": report.probe or None,
        "probe_detail": report.probe_detail,
        "probe_records": report.probe_records,
        "chance": report.chance,
        "sample": report.sample,
        "machine": report.machine,
        "settings": report.settings,
        "fingerprint": report.fingerprint,
        "input": _cell_dict(report.input) if report.input is not None else None,
        "cells": [_cell_dict(c) for c in report.cells],
        "recommendation": ("keep the input" if report.keep_input else describe(best))
        if best
        else None,
        "keep_input": report.keep_input,
        "reason": report.reason,
        "warnings": report.warnings,
        "skipped": report.skipped,
    }
    cleaned: dict[str, Any] = _clean(data)
    return cleaned


#: Cell fields that hold accuracy (left out of a CSV when none was measured).
_CELL_ACCURACY_FIELDS = (
    "accuracy",
    "accuracy_delta",
    "probe_s",
    "probe_dtype",
    "band",
    "within_noise",
    "probe_reused",
)


def _csv(report: BenchReport) -> str:
    buf = io.StringIO()
    data = to_json(report)
    cells = ([data["input"]] if data["input"] else []) + data["cells"]  # input row first
    drop = set() if data["probe"] else {*_CELL_ACCURACY_FIELDS}
    cells = [
        {"probe": data["probe"] or "", **{k: v for k, v in c.items() if k not in drop}}
        for c in cells
    ]
    writer = csv.DictWriter(buf, fieldnames=list(cells[0]) if cells else ["format"])
    writer.writeheader()
    for c in cells:
        writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in c.items()})
    return buf.getvalue()


def save_report(report: BenchReport, path: str) -> None:
    """Write ``.json``, ``.csv`` or ``.md`` by extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".json":
        text = json.dumps(to_json(report), indent=1)
    elif ext == ".csv":
        text = _csv(report)
    elif ext in (".md", ".markdown"):
        text = to_markdown(report)
    else:
        raise ValueError(f"report file must end in .json, .csv or .md. Got {path!r}.")
    with open(path, "w") as f:
        f.write(text + ("\n" if not text.endswith("\n") else ""))
