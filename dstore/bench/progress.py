"""Progress you can plan by, and a report that survives an interruption.

The first line says how many cells will be measured, on how many records, and
about how long it will take; each cell's line gives its figures and the time left.
The estimate starts from a rough model of this kind of machine (seconds per MB
the cells write and read back, per probe record) and, after each cell, is scaled
by how the cells measured so far compared with the model.

:func:`save_partial` writes the report (JSON, CSV or Markdown by extension) after
every cell, to a temporary name renamed over the old one, so an interruption or a
crash leaves the last complete report; ``--resume`` reads such a JSON report back
(:func:`load_resumable`) and measures only the cells it lacks, refusing a report
made from another input or with other settings.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..bounded_json import JsonLimitError, load_json_file
from ..errors import UsageError
from .plan import CellSpec
from .recommend import describe
from .results import BenchReport, Cell
from .tasks import Task
from .text import fmt_size, num

__all__ = [
    "Eta",
    "cell_from_json",
    "cell_line",
    "input_fingerprint",
    "load_resumable",
    "plan_line",
    "probe_line",
    "save_partial",
]

#: The model: fixed seconds per cell (a child process, its imports, opening outputs),
#: seconds per raw MB written (about 1.2x, parts and warm-up) and read back (about
#: 2x: the comparison and the timed read), and per record the probe turns into
#: image features. Measured on a 2-core machine; the runs correct it.
_CELL_S, _PER_MB_S, _PROBE_IMAGE_S = 3.0, 0.05, 0.012


def _fmt_duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "?"
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


class Eta:
    """The estimate of the time left, refined as cells finish."""

    def __init__(
        self, specs: Sequence[CellSpec], measured_mb: float, probe_records: int, images: bool
    ) -> None:
        self.model = [self._model(s, measured_mb, probe_records, images) for s in specs]
        self.spent: list[float | None] = []

    @staticmethod
    def _model(spec: CellSpec, mb: float, probe_records: int, images: bool) -> float:
        lossy = spec.dtype != "keep" or (
            spec.images not in ("png", "-") and not spec.images.startswith("png:")
        )
        probe = probe_records * (_PROBE_IMAGE_S if images else 0.0002) if lossy else 0.0
        return _CELL_S + _PER_MB_S * mb + probe

    def setup_seconds(self, input_mb: float, measured_mb: float, repeats: int) -> float:
        """Reading the input once to copy the records measured, timing its reads, the
        original's probe score."""
        return 0.01 * input_mb * (1 + repeats) + 0.02 * measured_mb + max(self.model, default=0) / 2

    def left(self, done: int) -> float:
        """Seconds left after ``done`` cells (those measured so far scale the model)."""
        pairs = [(s, m) for s, m in zip(self.spent, self.model, strict=False) if s is not None]
        spent, model = sum(s for s, _ in pairs), sum(m for _, m in pairs)
        scale = spent / model if pairs and model else 1.0
        return scale * sum(self.model[done:])

    def total(self) -> float:
        return sum(self.model)

    def done(self, seconds: float, earlier: bool = False) -> None:
        """A cell finished in ``seconds`` (``earlier``: taken from a report, not timed)."""
        self.spent.append(None if earlier else seconds)

    @staticmethod
    def duration(seconds: float) -> str:
        return _fmt_duration(seconds)


def input_fingerprint(path: str, info: Any) -> dict[str, Any]:
    """What identifies the input for ``--resume``: path, bytes, records, modification time."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = 0
    counts = {s: sp.count for s, sp in info.schema.splits.items()}
    return {
        "path": os.path.abspath(path),
        "bytes": info.bytes_on_disk,
        "records": counts,
        "mtime_ns": mtime,
    }


def save_partial(report: BenchReport, path: str, write: Callable[[BenchReport, str], None]) -> None:
    """``write(report, tmp)`` then rename over ``path``: never a half-written report."""
    folder = os.path.dirname(os.path.abspath(path))
    ext = os.path.splitext(path)[1]
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp{ext}")
    try:
        write(report, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_resumable(
    path: str, fingerprint: dict[str, Any], settings: dict[str, Any]
) -> dict[str, Cell]:
    """The measured cells of a report from an earlier run, by key; one UsageError line when
    the report cannot be resumed (missing, not JSON, another input or other settings)."""
    if not path.lower().endswith(".json"):
        raise UsageError(f"--resume reads the JSON report: give --report FILE.json (got {path!r})")
    if not os.path.exists(path):
        raise UsageError(f"--resume: no report at {path} to resume; run without --resume first")
    try:
        data = load_json_file(path, "bench report")
        cells = data["cells"]
        theirs, their_input = data["settings"], data["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError, JsonLimitError) as e:
        raise UsageError(f"--resume: {path} is not a dstore bench report ({e})") from None
    if their_input != fingerprint:
        raise UsageError(
            f"--resume: {path} was measured on another input ({their_input.get('path')}, "
            f"{their_input.get('bytes')} bytes); remove it or name another --report"
        )
    if theirs != settings:
        diff = sorted(k for k in set(theirs) | set(settings) if theirs.get(k) != settings.get(k))
        raise UsageError(
            f"--resume: {path} was measured with other settings ({', '.join(diff)}); "
            "run with the same options, or name another --report"
        )
    out: dict[str, Cell] = {}
    for raw in cells:
        cell = cell_from_json(raw)
        out[cell.key] = cell
    return out


def cell_from_json(raw: dict[str, Any]) -> Cell:
    """A cell as :func:`dstore.bench.report.to_json` wrote it (JSON's nulls: NaN floats)."""
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(Cell):
        if f.name in raw:
            value = raw[f.name]
            kw[f.name] = math.nan if value is None and f.type == "float" else value
    cell = Cell(**kw)
    cell.intervals = {
        k: [math.nan if v is None else float(v) for v in pair] for k, pair in cell.intervals.items()
    }
    return cell


def plan_line(report: BenchReport, plan: Any, seconds: float) -> str:
    """The first progress line: how many cells, on which records, about how long."""
    on = (
        f"{plan.records:,} of {plan.total:,} records (sampled)"
        if plan.sampled
        else f"all {plan.total:,} records"
    )
    return (
        f"dstore bench {report.source}: {report.planned} cells on {on}, "
        f"about {Eta.duration(seconds)}"
    )


def probe_line(task: Task | None, score: float, chance: float, seconds: float, records: str) -> str:
    """One line: the original data's score (progress)."""
    name = task.probe if task is not None else "evaluate"
    value = f"{100 * score:.2f}%" if task is not None else f"{score:.4g}"
    guess = f" (constant guess {100 * chance:.2f}%)" if not math.isnan(chance) else ""
    return f"probe: {name} on {records}: original data {value}{guess}, trained in {seconds:.2f} s"


def cell_line(cell: Cell, i: int, total: int, left: str) -> str:
    """One progress line per finished cell, with the time left."""
    head = f"[{i}/{total}] {describe(cell) if not cell.is_input else cell.label}"
    tail = f" -- {left}" if left else ""
    if cell.unsupported:
        return f"{head}: not supported: {cell.unsupported}{tail}"
    if cell.error:
        return f"{head}: {cell.error.splitlines()[0]}{tail}"
    parts = [fmt_size(cell.bytes)]
    if not math.isnan(cell.write_s):
        parts.append(f"write {cell.write_s:.2f} s")
    parts.append(f"read {num(cell.read_s, '.2f')} s")
    if not math.isnan(cell.loader_rps):
        parts.append(f"loader {cell.loader_rps:,.0f} records/s")
    if not math.isnan(cell.shuffled_rps):
        parts.append(f"shuffled {cell.shuffled_rps:,.0f} records/s")
    elif cell.shuffle_note:  # the reason is the table's note
        parts.append("no shuffled read (see the note)")
    if not math.isnan(cell.accuracy) and not cell.is_input:
        parts.append(f"delta {cell.accuracy_delta:+.2f} pts")
    return f"{head}: {', '.join(parts)}{tail}"
