"""Dtype policies: which floating fields are cast, and what a lossy cast may do.

``keep`` changes nothing. ``float32`` / ``float16`` cast floating fields only
(integers, bools and complex stay as they are), for every field or per field
(``x=float16``). A cast that turns finite values into ``inf`` is refused with
the split, field, count and first record, unless ``on_overflow="clip"`` clips
to the largest finite value. :class:`CastStats` reports the error introduced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from .errors import DtypePolicyError
from .model import Kind, Ragged, Tensor, VarColumn
from .schema import Batch, FieldSpec, Schema, SplitSpec

__all__ = ["CastStats", "DtypePolicy", "parse_policy"]

_TARGETS: dict[str, np.dtype | None] = {
    "keep": None,
    "float16": np.dtype("float16"),
    "float32": np.dtype("float32"),
    "float64": np.dtype("float64"),
}
OnOverflow = Literal["error", "clip"]


@dataclass
class CastStats:
    """Error a cast introduced, per field (finite values only)."""

    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    clipped: int = 0


@dataclass(frozen=True)
class DtypePolicy:
    """Floating-point cast rules for a conversion."""

    default: str = "keep"
    per_field: Mapping[str, str] = field(default_factory=dict)
    on_overflow: OnOverflow = "error"

    def __post_init__(self) -> None:
        for name, target in [("*", self.default), *self.per_field.items()]:
            if target not in _TARGETS:
                raise DtypePolicyError(
                    f"dtype policy for {name!r}: {target!r} is not one of {', '.join(_TARGETS)}"
                )
        if self.on_overflow not in ("error", "clip"):
            raise DtypePolicyError(
                f"on_overflow must be 'error' or 'clip', got {self.on_overflow!r}"
            )

    @property
    def is_identity(self) -> bool:
        return self.default == "keep" and all(t == "keep" for t in self.per_field.values())

    def target(self, spec: FieldSpec) -> np.dtype:
        """The dtype ``spec``'s values are stored as under this policy."""
        name = self.per_field.get(spec.name, self.default)
        new = _TARGETS[name]
        if new is None or spec.dtype.kind != "f" or not isinstance(spec.kind, (Tensor, Ragged)):
            return spec.dtype
        return new.newbyteorder(spec.dtype.byteorder) if spec.dtype.byteorder == ">" else new

    def target_kind(self, spec: FieldSpec) -> Kind:
        """The kind ``spec`` is stored as: floating Tensor and Ragged values may be cast."""
        new = self.target(spec)
        if new == spec.dtype:
            return spec.kind
        if isinstance(spec.kind, Ragged):
            return Ragged(new, spec.kind.inner_shape)
        return Tensor(new, spec.shape)

    def check_fields(self, schema: Schema) -> None:
        """Refuse a per-field rule naming a field no split has: a typo would cast nothing."""
        known: dict[str, bool] = {}
        for split in schema.splits.values():
            for f in split.fields.values():
                floating = f.dtype.kind == "f" and isinstance(f.kind, (Tensor, Ragged))
                known[f.name] = known.get(f.name, False) or floating
        missing = [name for name in self.per_field if name not in known]
        if missing:
            listing = ", ".join(f"{n} (floating)" if flt else n for n, flt in known.items())
            raise DtypePolicyError(
                f"dtype policy names field(s) {', '.join(map(repr, missing))}, which no split has; "
                f"fields: {listing or 'none'}"
            )

    def apply_schema(self, schema: Schema) -> Schema:
        """The schema of the output, known before any data is read."""
        self.check_fields(schema)
        out = schema
        for split in schema.splits.values():
            out = out.with_fields(
                split.name, [replace(f, kind=self.target_kind(f)) for f in split.fields.values()]
            )
        return out

    def apply(
        self,
        split: SplitSpec,
        batch: Batch,
        first_record: int,
        stats: dict[str, CastStats],
        source: str = "",
    ) -> Batch:
        """Cast one batch; raise on overflow unless clipping; update ``stats``."""
        if self.is_identity:
            return batch
        out: Batch = {}
        for name, col in batch.items():
            spec = split.fields[name]
            new = self.target(spec)
            if isinstance(col, VarColumn):
                if new == col.values.dtype or isinstance(col.values, VarColumn):
                    out[name] = col
                    continue

                def record_of(i: int, offsets: np.ndarray = col.offsets) -> int:
                    return int(np.searchsorted(offsets, i, side="right")) - 1

                values = self._cast(
                    col.values, new, split.name, name, first_record, stats, source, record_of
                )
                out[name] = VarColumn(values, col.offsets, col.shapes)
                continue
            if new == col.dtype:
                out[name] = col
                continue
            out[name] = self._cast(col, new, split.name, name, first_record, stats, source)
        return out

    def _cast(
        self,
        arr: np.ndarray,
        new: np.dtype,
        split: str,
        name: str,
        first_record: int,
        stats: dict[str, CastStats],
        source: str,
        record_of: Callable[[int], int] | None = None,
    ) -> np.ndarray:
        st = stats.setdefault(name, CastStats())
        with np.errstate(over="ignore", invalid="ignore"):
            cast = arr.astype(new)
        finite_in = np.isfinite(arr)
        overflow = finite_in & ~np.isfinite(cast)
        n_over = int(np.count_nonzero(overflow))
        if n_over:
            if self.on_overflow == "error":
                at = int(np.argwhere(overflow)[0][0])  # along the first axis
                first = (record_of(at) if record_of is not None else at) + first_record
                where = f"{source}: " if source else ""
                limit = float(np.finfo(new).max)
                raise DtypePolicyError(
                    f"{where}split {split!r}, field {name!r}: {n_over} value(s) overflow "
                    f"{new.name} (|x| > {limit:g}), first at record {first}; "
                    f"use --on-overflow clip or a wider dtype"
                )
            # Clip only what overflowed: infinities already in the input stay.
            limit = np.finfo(new).max
            cast = np.where(overflow, np.copysign(limit, arr), cast).astype(new)
            st.clipped += n_over
        if cast.size:
            back = cast.astype(arr.dtype)
            with np.errstate(over="ignore", invalid="ignore"):
                err = np.abs(back - arr)
                err = np.where(finite_in, err, 0)
                denom = np.abs(arr)
                rel = np.where(finite_in & (denom > 0), err / np.where(denom > 0, denom, 1), 0)
            st.max_abs_error = max(st.max_abs_error, float(err.max()))
            st.max_rel_error = max(st.max_rel_error, float(rel.max()))
        return cast


def parse_policy(
    specs: str | Sequence[str] | None, on_overflow: OnOverflow = "error"
) -> DtypePolicy:
    """Parse ``"float16"``, ``"x=float16,y=keep"`` or a list of such strings."""
    if isinstance(specs, DtypePolicy):
        return specs
    if specs is None:
        return DtypePolicy(on_overflow=on_overflow)
    if isinstance(specs, str):
        specs = [specs]
    default = "keep"
    per_field: dict[str, str] = {}
    for spec in specs:
        for part in str(spec).split(","):
            part = part.strip()
            if not part:
                continue
            if "=" in part:
                name, _, target = part.partition("=")
                per_field[name.strip()] = target.strip()
            else:
                default = part
    return DtypePolicy(default, per_field, on_overflow)
