"""``rai:dataPreprocessingProtocol``: every lossy choice a dataset's fields went through,
with the error measured, and ``dstore bench``'s accuracy figures.

Nothing is stated that was not measured or recorded: a lossy choice is read
from the stored data (a precision record, a lossy image encoding) or, when the
card is written with the conversion, from its dtype policy; an error comes
from the conversion's own cast statistics (every value, against the source),
from ``dstore verify`` against a source (``dstore card --source``), or from
an earlier card of the very same files. A choice whose error nothing measured
says so and how to measure it. One line per field (its splits named), so that a
later card can keep the lines it cannot measure again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import CodecIOError
from ..model.precision import PRECISION_ATTR, describe_precision, is_floating, tolerance
from ..model.schema import FieldSpec, Schema
from ..sources.permuted import SHUFFLE_ATTR
from .facts import Facts

__all__ = ["Written", "bench_lines", "protocol_lines"]


@dataclasses.dataclass
class Written:
    """What is known of the source a dataset was written from: its schema (and format),
    and, when the card is written with the conversion, the dtype policy's target per
    field and each cast field's largest errors over every value (CastStats whose
    maxima and clipped count are set: the same however the run went, resumed, on
    processes or on Dask)."""

    source: str
    source_schema: Schema
    targets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    stats: Mapping[str, Any] | None = None
    source_format: str | None = None


def _g(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def _splits(where: Iterable[str], schema: Schema) -> str:
    shown = list(where)
    return "" if len(shown) == len(schema.splits) else f" (split {', '.join(shown)})"


def _cast_choice(name: str, spec: FieldSpec, written: Written | None) -> str | None:
    """``float64 -> float16 (dtype policy float16)`` for a field the conversion cast."""
    if written is None or PRECISION_ATTR in spec.attrs or not is_floating(spec.dtype):
        return None  # a precision encoding (bfloat16, int8) describes itself
    for split in written.source_schema.splits.values():
        src = split.fields.get(name)
        if src is not None and src.dtype != spec.dtype and is_floating(src.dtype):
            target = written.targets.get(name)
            policy = f" (dtype policy {target})" if target else ""
            return f"{src.dtype.name} -> {spec.dtype.name}{policy}"
    return None


def _choice(name: str, spec: FieldSpec, lossy: Any, written: Written | None) -> str | None:
    """The lossy choice behind ``spec``'s stored values, or None if there is none known."""
    if lossy is not None:
        return f"pixels stored as {lossy.describe()} images (declared PSNR >= {lossy.psnr_floor():.0f} dB)"
    parts = [p for p in (_cast_choice(name, spec, written), describe_precision(spec)) if p]
    bound = tolerance(spec)
    if bound is not None:
        parts.append(f"declared bound {bound[0]}")
    return "; ".join(parts) or None


def _measured_text(m: Mapping[str, float], how: str) -> str:
    text = f"max abs error {_g(m['max_abs_error'])}, mean abs error {_g(m['mean_abs_error'])}"
    if "max_rel_error" in m:
        text += f", max rel error {_g(m['max_rel_error'])}"
    if "psnr_db" in m:
        text += f", PSNR {_g(m['psnr_db'])} dB"
    if m.get("clipped"):
        text += f", {int(m['clipped'])} value(s) clipped"
    return f"{text} ({how})"


def _written_measure(name: str, written: Written) -> str | None:
    """The conversion's own measure of a field it cast or encoded: the largest errors."""
    st = (written.stats or {}).get(name)
    if st is None:
        return None
    text = f"max abs error {_g(st.max_abs_error)}, max rel error {_g(st.max_rel_error)}"
    if st.clipped:
        text += ", values beyond the target's range clipped"
    return f"{text} (every value, measured against the source when written)"


def protocol_lines(
    facts: Facts,
    written: Written | None = None,
    verified: Mapping[tuple[str, str], Mapping[str, float]] | None = None,
    source: str | None = None,
    previous: Mapping[str, str] | None = None,
) -> list[str]:
    """One line per field with a lossy choice: ``<field>: <choice>; <error>``, after
    a ``record order:`` line when the records were shuffled at conversion.

    ``verified`` holds ``dstore verify``'s measurements against ``source`` per (split,
    field); ``previous`` an earlier card's lines of the same files, per field."""
    schema = facts.schema
    fields: dict[str, list[str]] = {}
    for split in schema.splits.values():
        for name in split.fields:
            fields.setdefault(name, []).append(split.name)
    lines = []
    for name, splits in fields.items():
        spec = schema.splits[splits[0]].fields[name]
        lossy = facts.lossy.get(splits[0], {}).get(name)
        choice = _choice(name, spec, lossy, written)
        measures = _verified(name, splits, schema, verified or {}, source)
        if not measures and lossy is None and written is not None:
            found = _written_measure(name, written)
            measures = [found] if found else []
        if not measures and previous and name in previous:
            lines.append(previous[name])  # measured before, of these very files
            continue
        if choice is None:
            continue
        if not measures:
            measures = ["error not measured: 'dstore card PATH --source SRC' measures it"]
        lines.append(f"{name}{_splits(splits, schema)}: {choice}; {'; '.join(measures)}")
    return _order_lines(schema) + lines


def _order_lines(schema: Schema) -> list[str]:
    """The shuffle at conversion the records went through (not lossy: their order)."""
    seed = schema.attrs.get(SHUFFLE_ATTR)
    if seed is None:
        return []
    return [
        f"record order: each split shuffled at conversion with seed {seed} (dstore convert "
        f"--shuffle-seed {seed}: record i is record permutation({seed}, split, count)[i] of "
        "the dataset converted, dstore.sources.permuted)"
    ]


def _verified(
    name: str,
    splits: list[str],
    schema: Schema,
    verified: Mapping[tuple[str, str], Mapping[str, float]],
    source: str | None,
) -> list[str]:
    """``dstore verify``'s measures of field ``name``, split by split, as one phrase."""
    found = [(s, verified[(s, name)]) for s in splits if (s, name) in verified]
    if not found:
        return []
    parts = [_measured_text(m, "").removesuffix(" ()") for _, m in found]
    if len(schema.splits) > 1:
        parts = [f"split {s}: {p}" for (s, _), p in zip(found, parts, strict=True)]
    return [f"{'; '.join(parts)} (against {os.path.basename(source or '')}, dstore verify)"]


def line_field(line: str) -> str:
    """The field a protocol line is about (its text up to `` (split`` or ``:``)."""
    head = line.split(": ", 1)[0]
    return head.split(" (split ", 1)[0]


# ------------------------------------------------------------------- dstore bench


def _load_report(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            report = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise CodecIOError(f"{path}: cannot read the bench report: {e}") from None
    if not isinstance(report, dict) or not isinstance(report.get("cells"), list):
        raise CodecIOError(f"{path}: not a report of 'dstore bench --report FILE.json'")
    return report


def _cell_line(c: Mapping[str, Any]) -> str | None:
    acc, delta = c.get("accuracy"), c.get("accuracy_delta")
    if not isinstance(acc, (int, float)):
        return None
    what = " ".join(str(c.get(k)) for k in ("format", "images", "dtype") if c.get(k))
    text = f"{what}: accuracy {acc:.4g}"
    if isinstance(delta, (int, float)):
        text += f" ({delta:+.2f} points against the original"
        band = c.get("band")
        text += f", noise band +/-{band:.2f})" if isinstance(band, (int, float)) else ")"
    return text


def bench_lines(path: str, fmt: str) -> list[str]:
    """The accuracy ``dstore bench`` measured on the source: the probe on the original
    data and on every configuration of format ``fmt`` it wrote (a report read as data)."""
    report = _load_report(path)
    probe, base = report.get("probe"), report.get("baseline_accuracy")
    if not probe or not isinstance(base, (int, float)):
        return [f"dstore bench ({os.path.basename(path)}): no accuracy was measured"]
    source = os.path.basename(str(report.get("source", "")))
    cells = [c for c in report["cells"] if isinstance(c, dict) and c.get("format") == fmt]
    shown = [line for c in cells if (line := _cell_line(c)) is not None]
    head = (
        f"dstore bench on {source} ({os.path.basename(path)}): {probe} probe accuracy "
        f"{base:.4g} on the original data"
    )
    if not shown:
        return [f"{head}; no {fmt} configuration was measured"]
    return [f"{head}; {line}" for line in shown]
