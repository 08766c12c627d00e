"""Dtype policies: which floating fields are cast or encoded lossily, and what that may do.

``keep`` changes nothing. ``float32`` / ``float16`` / ``float64`` cast floating
fields only (integers, bools and complex stay as they are), for every field or
per field (``x=float16``). ``bfloat16``, ``round:N`` and ``int8`` / ``uint8``
(``:channel`` for per-channel scales) are lossy encodings that the stored field
records (:mod:`dstore.model.precision`) and readers decode. A cast that turns finite
values into ``inf`` is refused with the split, field, count and first record,
unless ``on_overflow="clip"`` clips to the largest finite value. :class:`CastStats`
reports the error introduced.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ..errors import DtypePolicyError, UnsupportedDtypeError
from ..model import Kind, Ragged, Tensor, VarColumn
from ..model import precision as prec
from ..model.attrs import encode
from ..model.schema import Batch, FieldSpec, Schema, SplitSpec

__all__ = ["CastStats", "DtypePolicy", "parse_policy"]

OnOverflow = Literal["error", "clip"]
#: CF-convention attributes (xarray decodes them) written beside int8/uint8 codes.
CF_ATTRS = ("scale_factor", "add_offset")


@dataclass
class CastStats:
    """Error a cast introduced, per field (finite values only)."""

    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    clipped: int = 0
    sum_abs_error: float = 0.0
    count: int = 0

    @property
    def mean_abs_error(self) -> float:
        return self.sum_abs_error / self.count if self.count else 0.0

    def merge(self, other: CastStats) -> None:
        """Add the error another part of the same field reported (a shard, a worker)."""
        self.max_abs_error = max(self.max_abs_error, other.max_abs_error)
        self.max_rel_error = max(self.max_rel_error, other.max_rel_error)
        self.clipped += other.clipped
        self.sum_abs_error += other.sum_abs_error
        self.count += other.count

    @staticmethod
    def merge_into(into: dict[str, CastStats], more: Mapping[str, CastStats]) -> None:
        """Per-field stats of another part merged into ``into``, field by field."""
        for name, stats in more.items():
            into.setdefault(name, CastStats()).merge(stats)


def _floating_field(spec: FieldSpec) -> bool:
    return prec.is_floating(spec.dtype) and isinstance(spec.kind, (Tensor, Ragged))


@dataclass(frozen=True)
class DtypePolicy:
    """Floating-point cast and encoding rules for a conversion."""

    default: str = "keep"
    per_field: Mapping[str, str] = field(default_factory=dict)
    on_overflow: OnOverflow = "error"
    #: set by :meth:`prepare` from the data and the output format: the int8/uint8
    #: records (scale, offset) per field name, and how the format stores bfloat16
    quant: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False)
    bfloat16_as: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        for name, target in [("*", self.default), *self.per_field.items()]:
            prec.parse_target(target, name)
        if self.on_overflow not in ("error", "clip"):
            raise DtypePolicyError(
                f"on_overflow must be 'error' or 'clip', got {self.on_overflow!r}"
            )

    @property
    def is_identity(self) -> bool:
        return self.default == "keep" and all(t == "keep" for t in self.per_field.values())

    def _target(self, spec: FieldSpec) -> prec.Target:
        """What happens to ``spec``; a bfloat16 field under ``keep`` is stored as bfloat16."""
        t = prec.parse_target(self.per_field.get(spec.name, self.default), spec.name)
        if not _floating_field(spec):
            return prec.Target("keep", "keep")
        if t.op == "keep" and spec.dtype.name == "bfloat16":
            return prec.Target("bfloat16", "bfloat16")
        return t

    def changes(self, spec: FieldSpec) -> bool:
        """Whether this policy stores ``spec``'s values otherwise than they are: a cast to
        another dtype or a lossy encoding (a cast to the dtype the field has, or bfloat16
        of a bfloat16 field, changes nothing; ``dstore bench`` measures no such cell)."""
        t = self._target(spec)
        if t.op == "keep":
            return False
        if t.op == "cast":
            return t.dtype is None or t.dtype.newbyteorder("=") != spec.dtype.newbyteorder("=")
        return not (t.op == "bfloat16" and spec.dtype.name == "bfloat16")

    def _bf16_storage(self) -> np.dtype:
        if self.bfloat16_as is None:
            raise DtypePolicyError("bfloat16: the policy was not prepared for an output format")
        return np.dtype(self.bfloat16_as)

    def target(self, spec: FieldSpec) -> np.dtype:
        """The dtype ``spec``'s values are stored as under this policy."""
        t = self._target(spec)
        if t.op == "keep":
            return spec.dtype
        if t.op == "bfloat16":
            return self._bf16_storage()
        assert t.dtype is not None
        if t.op == "cast" and spec.dtype.byteorder == ">":
            return t.dtype.newbyteorder(">")
        return t.dtype

    def target_kind(self, spec: FieldSpec) -> Kind:
        """The kind ``spec`` is stored as: floating Tensor and Ragged values may be cast."""
        new = self.target(spec)
        if new == spec.dtype:
            return spec.kind
        if isinstance(spec.kind, Ragged):
            return Ragged(new, spec.kind.inner_shape)
        return Tensor(new, spec.shape)

    def target_attrs(self, spec: FieldSpec) -> Mapping[str, Any]:
        """The stored field's attributes: the lossy encoding recorded, a stale record dropped.

        A record read from a source describes the source's storage: it is kept only
        for ``round:N`` values kept as they are (they still have N bits)."""
        t = self._target(spec)
        old = spec.attrs.get(prec.PRECISION_ATTR)
        attrs = dict(spec.attrs)
        user = dict(attrs.get("user", {}))
        if isinstance(old, Mapping) and str(old.get("policy", "")).split(":")[0] in (
            "int8",
            "uint8",
        ):
            for name in CF_ATTRS:
                user.pop(name, None)
        keep_old = (
            t.op == "keep"
            and isinstance(old, Mapping)
            and str(old.get("policy", "")).startswith("round:")
            and spec.dtype == np.float32
        )
        if not keep_old:
            attrs.pop(prec.PRECISION_ATTR, None)
        if t.op == "bfloat16":
            attrs[prec.PRECISION_ATTR] = {"policy": "bfloat16", "stored": self._bf16_storage().name}
        elif t.op == "round":
            attrs[prec.PRECISION_ATTR] = {"policy": t.spec, "keepbits": t.keepbits}
        elif t.op == "quant":
            rec = self._quant_record(spec)
            attrs[prec.PRECISION_ATTR] = rec
            scale, offset = prec.quant_arrays(rec)
            user["scale_factor"] = encode(scale)
            user["add_offset"] = encode(offset)
        if user:
            attrs["user"] = user
        else:
            attrs.pop("user", None)
        return attrs

    def _quant_record(self, spec: FieldSpec) -> Mapping[str, Any]:
        try:
            return self.quant[spec.name]
        except KeyError:
            raise DtypePolicyError(
                f"field {spec.name!r}: int8/uint8 needs the field's range; "
                "the policy was not prepared over the data"
            ) from None

    def check_fields(self, schema: Schema) -> None:
        """Refuse a per-field rule naming a field no split has (a typo would cast nothing),
        and a lossy encoding asked by name for a field that is not floating."""
        known: dict[str, bool] = {}
        for split in schema.splits.values():
            for f in split.fields.values():
                known[f.name] = known.get(f.name, False) or _floating_field(f)
        missing = [name for name in self.per_field if name not in known]
        if missing:
            listing = ", ".join(f"{n} (floating)" if flt else n for n, flt in known.items())
            raise DtypePolicyError(
                f"dtype policy names field(s) {', '.join(map(repr, missing))}, which no split has; "
                f"fields: {listing or 'none'}"
            )
        for name, spec_text in self.per_field.items():
            t = prec.parse_target(spec_text, name)
            if t.op != "keep" and not known[name]:
                what = next(
                    f.kind.describe()
                    for s in schema.splits.values()
                    for f in s.fields.values()
                    if f.name == name
                )
                raise DtypePolicyError(
                    f"dtype policy for {name!r}: {t.spec} applies to floating fields; "
                    f"{name!r} is {what}, which it would leave as it is"
                )

    def notes(self, schema: Schema) -> list[str]:
        """A blanket policy that finds no floating field changes nothing: one note (the
        data may be all integers on purpose, so it is not an error)."""
        if self.default == "keep" or any(
            _floating_field(f) for s in schema.splits.values() for f in s.fields.values()
        ):
            return []
        return [f"dtype policy {self.default} changed nothing: no field is floating"]

    def prepare(self, reader: Any, codec: Any) -> DtypePolicy:
        """The policy resolved for ``reader``'s data and ``codec``: int8/uint8 ranges are
        scanned over every split (one read of those fields), and bfloat16 is refused by
        a format that cannot carry it."""
        schema: Schema = reader.schema
        self.check_fields(schema)
        targets = {
            f.name: (f, self._target(f)) for s in schema.splits.values() for f in s.fields.values()
        }
        bfloat16_as = _bfloat16_as(
            codec, [n for n, (_, t) in targets.items() if t.op == "bfloat16"]
        )
        # a field whose codes' scale is fixed already (an append: the dataset's) keeps it
        quant = {
            n: (f, t) for n, (f, t) in targets.items() if t.op == "quant" and n not in self.quant
        }
        for name, (f, t) in quant.items():
            if t.per_channel and not f.shape:
                raise DtypePolicyError(
                    f"dtype policy for {name!r}: {t.spec} needs a last axis of channels; "
                    f"{name!r} is {f.kind.describe()}"
                )
        scans = _scan_ranges(reader, quant)
        records = {
            name: _quant_record(reader, name, f, t, scans[name]) for name, (f, t) in quant.items()
        }
        return replace(
            self, quant={**self.quant, **records}, bfloat16_as=self.bfloat16_as or bfloat16_as
        )

    def apply_schema(self, schema: Schema) -> Schema:
        """The schema of the output, known before any data is read (after :meth:`prepare`)."""
        self.check_fields(schema)
        out = schema
        for split in schema.splits.values():
            out = out.with_fields(
                split.name,
                [
                    replace(f, kind=self.target_kind(f), attrs=self.target_attrs(f))
                    for f in split.fields.values()
                ],
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
        """Cast or encode one batch; raise on overflow unless clipping; update ``stats``."""
        if self.is_identity and not any(f.dtype.name == "bfloat16" for f in split.fields.values()):
            return batch
        out: Batch = {}
        for name, col in batch.items():
            spec = split.fields[name]
            t = self._target(spec)
            new = self.target(spec)
            if isinstance(col, VarColumn):
                if (
                    t.op == "keep"
                    or isinstance(col.values, VarColumn)
                    or (t.op == "cast" and new == col.values.dtype)
                ):
                    out[name] = col
                    continue

                def record_of(i: int, offsets: np.ndarray = col.offsets) -> int:
                    return int(np.searchsorted(offsets, i, side="right")) - 1

                values = self._encode(
                    col.values, spec, t, split.name, first_record, stats, source, record_of
                )
                out[name] = VarColumn(values, col.offsets, col.shapes)
                continue
            if t.op == "keep" or (t.op == "cast" and new == col.dtype):
                out[name] = col
                continue
            out[name] = self._encode(col, spec, t, split.name, first_record, stats, source)
        return out

    def _encode(
        self,
        arr: np.ndarray,
        spec: FieldSpec,
        t: prec.Target,
        split: str,
        first_record: int,
        stats: dict[str, CastStats],
        source: str,
        record_of: Callable[[int], int] | None = None,
    ) -> np.ndarray:
        """The stored values of ``arr`` under ``t``, with the overflow rule and error stats."""
        name = spec.name
        st = stats.setdefault(name, CastStats())
        if t.op == "bfloat16" and arr.dtype.name == "bfloat16":  # already bfloat16: exact
            return self._bf16_store(arr)
        if t.op == "quant":
            rec = self._quant_record(spec)
            scale, offset = prec.quant_arrays(rec)
            assert t.dtype is not None
            codes = prec.quantize(arr, scale, offset, t.dtype)
            self._account(st, arr, prec.dequantize(codes, scale, offset))
            return codes
        approx, limit = self._round(arr, t)
        finite_in = np.isfinite(arr)
        overflow = finite_in & ~np.isfinite(approx)
        n_over = int(np.count_nonzero(overflow))
        if n_over:
            if self.on_overflow == "error":
                at = int(np.argwhere(overflow)[0][0])  # along the first axis
                first = (record_of(at) if record_of is not None else at) + first_record
                where = f"{source}: " if source else ""
                what = (
                    f"(|x| > {float(limit):g})"
                    if t.op == "cast"
                    else f"(they round to inf; its largest finite value is {float(limit):g})"
                )
                raise DtypePolicyError(
                    f"{where}split {split!r}, field {name!r}: {n_over} value(s) overflow "
                    f"{t.spec} {what}, first at record {first}; "
                    f"use on_overflow='clip' or a wider dtype"
                )
            # Clip only what overflowed: infinities already in the input stay.
            dtype = approx.dtype  # np.where would make a big-endian cast native
            approx = np.where(overflow, np.copysign(limit, arr).astype(dtype), approx).astype(dtype)
            st.clipped += n_over
        self._account(st, arr, approx)
        return self._bf16_store(approx) if t.op == "bfloat16" else approx

    def _round(self, arr: np.ndarray, t: prec.Target) -> tuple[np.ndarray, np.generic]:
        """``arr`` rounded under ``t`` (may hold new infinities) and the largest finite value."""
        with np.errstate(over="ignore", invalid="ignore"):
            if t.op == "bfloat16":
                bf16 = prec.bfloat16_dtype("bfloat16")
                return arr.astype(bf16), prec.bfloat16_max()
            assert t.dtype is not None
            new = t.dtype.newbyteorder(">") if arr.dtype.byteorder == ">" else t.dtype
            if t.op == "round":
                f32 = np.finfo(np.float32).max
                return (
                    prec.bitround(arr.astype(np.float32), t.keepbits),
                    prec.truncate(np.array([f32]), t.keepbits)[0],
                )
            return arr.astype(new), np.finfo(new).max.astype(new)

    def _bf16_store(self, values: np.ndarray) -> np.ndarray:
        storage = self._bf16_storage()
        if storage.kind == "u":
            return np.ascontiguousarray(values).view(np.uint16)
        return values.astype(storage)

    @staticmethod
    def _account(st: CastStats, arr: np.ndarray, approx: np.ndarray) -> None:
        if not arr.size:
            return
        with np.errstate(over="ignore", invalid="ignore"):
            a = arr.astype(np.float64)
            err = np.abs(approx.astype(np.float64) - a)
            finite_in = np.isfinite(a)
            err = np.where(finite_in, err, 0)
            denom = np.abs(a)
            rel = np.where(finite_in & (denom > 0), err / np.where(denom > 0, denom, 1), 0)
        st.max_abs_error = max(st.max_abs_error, float(err.max()))
        st.max_rel_error = max(st.max_rel_error, float(rel.max()))
        st.sum_abs_error += float(err.sum())
        st.count += int(np.count_nonzero(finite_in))


def _bfloat16_as(codec: Any, fields: list[str]) -> str | None:
    """The dtype ``codec`` stores the bfloat16 ``fields`` as (None when there are none);
    a format that cannot carry bfloat16 is refused, naming the first field."""
    if not fields:
        return None
    bfloat16_as: str | None = getattr(codec, "bfloat16_as", None)
    if bfloat16_as is None:
        raise UnsupportedDtypeError(
            f"{codec.name}: field {fields[0]!r}: this format cannot carry bfloat16; "
            "use float16, round:7 (bfloat16's precision in float32) or float32"
        )
    prec.bfloat16_dtype(codec.name)
    return bfloat16_as


def _scan_ranges(reader: Any, quant: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The value range of each int8/uint8 field over every split (one read of those
    fields); a NaN or inf, which has no code, is refused naming its record."""
    scans = {n: prec.RangeScan(t.per_channel) for n, (_, t) in quant.items()}
    for split in reader.schema.splits.values():
        names = [n for n in split.fields if n in scans]
        pos = 0
        for batch in reader.iter_batches(split.name, fields=names) if names else ():
            for name in names:
                values = prec.column_values(batch[name])
                _check_finite(reader, split.name, name, batch[name], values, pos, quant[name][1])
                scans[name].update(values)
            pos += len(next(iter(batch.values())))
    return scans


def _check_finite(
    reader: Any, split: str, name: str, col: Any, values: np.ndarray, pos: int, target: Any
) -> None:
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    at = int(np.argwhere(bad)[0][0])
    if isinstance(col, VarColumn):
        at = int(np.searchsorted(col.offsets, at, side="right")) - 1
    where = f"{reader.path}: " if getattr(reader, "path", "") else ""
    raise DtypePolicyError(
        f"{where}split {split!r}, field {name!r}: "
        f"{int(np.count_nonzero(bad))} NaN/inf value(s) have no "
        f"{target.spec} code, first at record {pos + at}; "
        "use a float policy for this field"
    )


def _quant_record(reader: Any, name: str, f: Any, t: Any, scan: Any) -> Any:
    """The scale and offset of field ``name``'s codes, from its scanned range; a range
    whose codes would dequantize to inf is refused."""
    assert t.dtype is not None
    channels = f.shape[-1] if t.per_channel else 1
    scale, offset = scan.params(t.dtype, channels)
    info = np.iinfo(t.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        ends = prec.dequantize(np.array([[info.min], [info.max]], t.dtype), scale, offset)
    if not np.isfinite(ends).all():  # the codes could not be read back as float32
        lo, hi = scan.lo, scan.hi
        # a field with no values scans as range 0..0, whose codes are always finite
        assert lo is not None and hi is not None
        raise DtypePolicyError(
            f"{reader.path}: field {name!r}: its range reaches float32's limit "
            f"({float(np.min(lo)):g} .. "
            f"{float(np.max(hi)):g}), so {t.spec} codes would "
            "dequantize to inf; use round:N or bfloat16 for this field"
        )
    return prec.quant_record(t, scale, offset)


def parse_policy(
    specs: str | Sequence[str] | None, on_overflow: OnOverflow = "error"
) -> DtypePolicy:
    """Parse ``"float16"``, ``"x=int8:channel,y=keep"``, ``"round:8"`` or a list of such."""
    if isinstance(specs, DtypePolicy):
        return specs
    if specs is None:
        return DtypePolicy(on_overflow=on_overflow)
    if isinstance(specs, str):
        specs = [specs]
    default: str | None = None
    per_field: dict[str, str] = {}
    for spec in specs:
        for raw in str(spec).split(","):
            part = raw.strip()
            if not part:
                continue
            name, sep, target = part.partition("=") if "=" in part else ("", "", part)
            name, target = name.strip(), target.strip()
            # two rules for one field (or two blanket ones): which one wins would be an
            # accident of order, so say so instead of taking the last
            before = per_field.get(name) if sep else default
            if before is not None and before != target:
                what = f"field {name!r}" if sep else "every floating field"
                raise DtypePolicyError(
                    f"dtype policy gives {what} two rules, {before} and {target}; keep one"
                )
            if sep:
                per_field[name] = target
            else:
                default = target
    return DtypePolicy(default or "keep", per_field, on_overflow)
