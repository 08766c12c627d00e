"""The recommendation: the best cell by the goal, judged against the input as it is.

A cell may be recommended when it is lossless (every value read back equal) or, when
accuracy was measured, when it loses at most ``max_drop`` points or its difference
lies within its noise band (so noise cannot flip the choice); without a measured
accuracy only lossless cells. Never the input's own format and settings (the same
format within 1% of its size), never a file both larger and slower to read than
the input. The best of the rest must beat the input on the goal by more than the
noise -- 2% of size (or the cell's interval when extrapolated), 10% of time --
else the advice is to keep the input as it is.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable

from ..registry import default_extension
from .results import BenchReport, Cell

__all__ = ["OBJECTIVES", "acceptable", "recommend", "recommendation_lines"]

#: what each goal ranks by (best first), and how the reason names the winner
OBJECTIVES = {
    "size": "smallest",
    "write": "fastest to write",
    "read": "fastest to read",
    "balanced": "best balance of size, write and read time",
}
#: What a cell must beat the input by: sizes are exact but vary a little with the
#: data's order; times vary 10% or more between identical runs on shared machines.
SIZE_NOISE, TIME_NOISE = 0.02, 0.10


def acceptable(cell: Cell, max_drop: float) -> bool:
    """May ``cell`` be recommended when accuracy was measured? Lossless cells always; a
    lossy cell only with a noise band, when it loses at most ``max_drop`` points or
    its difference is within the band."""
    if cell.bit_exact or cell.exact:
        return True
    if math.isnan(cell.accuracy_delta) or cell.within_noise is None:
        return False
    return cell.accuracy_delta >= -max_drop or cell.within_noise


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


def _slower(c: Cell, inp: Cell) -> bool:
    """Slower to read than the input, by the same measure on both (loader or plain read)."""
    if _loaded(c) and _loaded(inp):
        return c.loader_rps <= inp.loader_rps
    return c.read_s >= inp.read_s


def _is_input_again(c: Cell, inp: Cell) -> bool:
    return c.format == inp.format and abs(c.bytes - inp.bytes) <= 0.01 * inp.bytes


def _comparable(inp: Cell | None) -> bool:
    return inp is not None and inp.error is None and inp.bytes > 0 and not math.isnan(inp.read_s)


def _gain(best: Cell, inp: Cell, objective: str) -> tuple[float, float]:
    """(best's figure over the input's, the noise it must beat) for the goal."""
    size_noise = max(SIZE_NOISE, best.spread("bytes"))
    time_noise = max(TIME_NOISE, best.spread("read_s"))
    size = best.bytes / inp.bytes
    if _loaded(best) and _loaded(inp):
        read = inp.loader_rps / best.loader_rps
    else:
        read = best.read_s / inp.read_s if inp.read_s > 0 else math.nan
    if objective == "size":
        return size, size_noise
    if objective == "read":
        return read, time_noise
    if objective == "balanced" and not math.isnan(read):
        return math.sqrt(size * read), max(size_noise, time_noise)
    return size, size_noise


def _acceptable_cells(report: BenchReport, max_drop: float, measured: bool) -> list[Cell]:
    ok = [c for c in report.cells if c.measured and not c.is_input]
    return [c for c in ok if acceptable(c, max_drop)] if measured else [c for c in ok if c.exact]


def _nothing(
    inp: Cell | None, judged: list[Cell], objective: str, measured: bool
) -> tuple[Cell | None, str, bool]:
    """No candidate left: keep the input (saying why), or no recommendation at all."""
    if inp is not None and judged:  # each one the input again, or larger and slower
        closest = min(judged, key=_ranking(objective, judged))
        return inp, _keep_reason(closest, objective, _gain(closest, inp, objective)[1]), True
    if inp is not None:
        return inp, "no cell met the accuracy bound", True
    if measured:
        return None, "no configuration met the accuracy bound", False
    return (
        None,
        ("no lossless configuration succeeded; no accuracy measured, lossy casts not considered"),
        False,
    )


def recommend(
    report: BenchReport, objective: str, max_drop: float
) -> tuple[Cell | None, str, bool]:
    """(the cell to convert to -- or the input when it should be kept --, why, keep?)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}. Got {objective!r}.")
    inp = report.input if _comparable(report.input) else None
    measured = not math.isnan(report.baseline_accuracy)
    judged = _acceptable_cells(report, max_drop, measured)
    ok = judged
    if inp is not None:
        ok = [c for c in ok if not _is_input_again(c, inp)]
        ok = [c for c in ok if not (c.bytes > inp.bytes and _slower(c, inp))]
    if not ok:
        return _nothing(inp, judged, objective, measured)
    best = min(ok, key=_ranking(objective, ok))
    if inp is not None and objective != "write":
        ratio, noise = _gain(best, inp, objective)
        if math.isnan(ratio) or ratio > 1 - noise:
            return inp, _keep_reason(best, objective, noise), True
    word = OBJECTIVES[objective]
    if measured:
        return best, f"{word} of {len(ok)} cells losing <= {max_drop:g} pts or within noise", False
    rule = f"{word} of {len(ok)} lossless cells (no accuracy measured, lossy casts not considered)"
    return best, rule, False


def _keep_reason(best: Cell, objective: str, noise: float) -> str:
    what = {"size": "smaller", "read": "faster to read"}.get(objective, "better")
    return (
        f"no cell is {what} than your input by more than the noise ({noise:.0%}); "
        f"the best, {describe(best)}, is {_size(best.bytes)}"
    )


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def describe(c: Cell) -> str:
    """``tfrecord jpeg:90``, ``zarr png float16``: format, image choice, dtype (when not keep)."""
    parts = [c.label]
    if c.images not in ("-", "as is"):
        parts.append(c.images)
    if c.dtype not in ("keep", "as is") or c.images == "-":
        parts.append(c.dtype)
    return " ".join(parts)


def _versus(best: Cell, inp: Cell | None, objective: str) -> str:
    if inp is None or not inp.bytes:
        return f"{_size(best.bytes)}"
    if objective == "read" and _loaded(best) and _loaded(inp):
        return f"{best.loader_rps / inp.loader_rps:.1f}x your input's loader speed"
    if objective == "read":
        return f"{inp.read_s / best.read_s:.1f}x your input's read speed"
    ratio = inp.bytes / best.bytes
    size = f"{_size(best.bytes)} vs {_size(inp.bytes)}"
    return f"{ratio:.1f}x smaller than your input ({size})" if ratio >= 1 else f"{size}"


def recommendation_lines(report: BenchReport) -> list[str]:
    """At most three short lines: what, why, the command."""
    best = report.recommendation
    if best is None:
        return [f"recommendation: none ({report.reason})"]
    if report.keep_input:
        return [
            f"recommendation: keep your input as it is ({report.source})",
            f"  why: {report.reason}",
        ]
    head = f"recommendation: {describe(best)} -- {_versus(best, report.input, report.settings.get('objective', 'size'))}"
    why = f"  why: {report.reason}"
    if not best.exact and not math.isnan(best.accuracy_delta):
        band = "" if math.isnan(best.band) else f" +/- {best.band:.2f}"
        why += f" (this one: {best.accuracy_delta:+.2f}{band})"
    command = ["dstore", "convert", report.source, f"out{default_extension(best.format)}"]
    if best.dtype != "keep":
        command += ["--dtype", best.dtype]
    for k, v in best.write_options.items():
        command += ["-o", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    return [head, why, f"  run: {shlex.join(command)}"]
