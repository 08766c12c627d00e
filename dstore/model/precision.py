"""Lossy number encodings of floating fields: bfloat16, bit rounding and int8/uint8 codes.

A dtype policy (:mod:`dstore.engine.dtypes`) names a *target* per field; this module
knows what each target stores and how a reader turns it back into numbers:

* ``float16`` / ``float32`` / ``float64``: a plain cast (no record needed);
* ``bfloat16``: values rounded to bfloat16 (``ml_dtypes``). None of the
  libraries has a bfloat16 type (zarr 3.1's dtype registry has none, h5py and
  ``np.save`` write ml_dtypes' bfloat16 as opaque ``V2``), so the 16 bits are
  stored as ``uint16`` (``codes.view(ml_dtypes.bfloat16)`` in the other
  library); TFRecord's float_list is float32, so there the bfloat16 values are
  stored widened to float32 (exact). dstore reads bfloat16 back;
* ``round:N``: float32 with N explicit mantissa bits kept, rounded to nearest
  (ties to even) exactly as numcodecs' ``BitRound`` does; stored and read as
  float32 (no decoding), and compresses far better;
* ``int8`` / ``uint8`` (``:channel`` for one scale per last-axis channel):
  linear codes ``x = code * scale + offset`` from the field's range over all
  splits; read back as float32.

What was done is recorded in the stored field's ``attrs["precision"]`` (the
schema every format keeps); for int8/uint8 the scale and offset are also
written as the array's own ``scale_factor`` / ``add_offset`` attributes (the
CF convention xarray decodes) where the format has attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import DtypePolicyError, MissingDependencyError, SchemaError
from . import Ragged, Tensor, VarColumn
from .schema import Batch, FieldSpec, Schema, SplitSpec

__all__ = [
    "PRECISION_ATTR",
    "Target",
    "bitround",
    "decode_column",
    "is_floating",
    "logical_schema",
    "parse_target",
    "tolerance",
]

#: Key of ``FieldSpec.attrs`` recording a lossy encoding.
PRECISION_ATTR = "precision"
#: Explicit mantissa bits of float32; ``round:23`` changes nothing.
FLOAT32_MANTISSA = 23
#: Explicit mantissa bits of bfloat16 (what its rounding keeps of a float32).
BFLOAT16_MANTISSA = 7
_CASTS = ("float16", "float32", "float64")
_QUANT = ("int8", "uint8")


@dataclass(frozen=True)
class Target:
    """One parsed target of a dtype policy."""

    spec: str  # as the user wrote it: "float16", "round:8", "int8:channel"
    op: str  # "keep", "cast", "bfloat16", "round" or "quant"
    dtype: np.dtype | None = None  # the cast dtype, or the codes' dtype
    keepbits: int = FLOAT32_MANTISSA
    per_channel: bool = False

    @property
    def lossy_record(self) -> bool:
        """True when the stored field records what was done (everything but plain casts)."""
        return self.op in ("bfloat16", "round", "quant")


def parse_target(text: str, where: str = "*") -> Target:
    """``keep``, ``float16|32|64``, ``bfloat16``, ``round:N`` (0..23), ``int8``/``uint8``
    with an optional ``:channel``; anything else is one error line."""
    spec = str(text).strip()
    base, _, arg = spec.partition(":")
    if spec == "keep":
        return Target(spec, "keep")
    if spec in _CASTS:
        return Target(spec, "cast", np.dtype(spec))
    if spec == "bfloat16":
        return Target(spec, "bfloat16")
    if base == "round" and ":" in spec:
        if not (arg.isdigit() and 0 <= int(arg) <= FLOAT32_MANTISSA):
            raise DtypePolicyError(
                f"dtype policy for {where!r}: {spec!r}: round:N keeps N of float32's "
                f"{FLOAT32_MANTISSA} mantissa bits, so N must be an integer 0..{FLOAT32_MANTISSA}"
            )
        return Target(spec, "round", np.dtype("float32"), keepbits=int(arg))
    if base in _QUANT and arg in ("", "channel"):
        return Target(spec, "quant", np.dtype(base), per_channel=arg == "channel")
    raise DtypePolicyError(
        f"dtype policy for {where!r}: {spec!r} is not one of keep, float16, float32, float64, "
        "bfloat16, round:N (N=0..23), int8, uint8, int8:channel, uint8:channel"
    )


def is_floating(dtype: np.dtype) -> bool:
    """numpy floats and ml_dtypes' bfloat16 (whose numpy kind is 'V')."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def bfloat16_dtype(what: str) -> np.dtype:
    """ml_dtypes' bfloat16, or one line naming the extra that installs it."""
    try:
        import ml_dtypes
    except ImportError:
        raise MissingDependencyError(what, "bfloat16", "ml_dtypes", what="bfloat16") from None
    return np.dtype(ml_dtypes.bfloat16)


def bfloat16_max() -> np.generic:
    """The largest finite bfloat16 (3.39e38)."""
    import ml_dtypes

    return ml_dtypes.finfo(ml_dtypes.bfloat16).max


def bitround(a: np.ndarray, keepbits: int) -> np.ndarray:
    """float32 ``a`` with ``keepbits`` mantissa bits, rounded to nearest, ties to even.

    The same integer arithmetic as ``numcodecs.BitRound`` (tests compare them
    bit for bit); not imported from there so that npz and HDF5 need no numcodecs.
    May round the largest values up to inf: the caller applies the overflow rule."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if keepbits >= FLOAT32_MANTISSA:
        return a.copy()
    drop = FLOAT32_MANTISSA - keepbits
    b = a.view(np.int32).copy()
    mask = np.int32((-1 >> drop) << drop)
    half_minus_one = np.int32((1 << (drop - 1)) - 1)
    with np.errstate(over="ignore"):
        b += ((b >> drop) & 1) + half_minus_one
    b &= mask
    return b.view(np.float32)


def truncate(a: np.ndarray, keepbits: int) -> np.ndarray:
    """``a`` with the dropped mantissa bits zeroed (rounding toward zero): never overflows."""
    drop = FLOAT32_MANTISSA - keepbits
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.int32) & np.int32((-1 >> drop) << drop)
    return b.view(np.float32)


# ------------------------------------------------------------------ int8 / uint8 codes


def quant_params(lo: np.ndarray, hi: np.ndarray, codes: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """float32 scale and offset mapping [lo, hi] onto the codes' range, with 0.0 exact.

    Where the range holds 0, the offset is a whole number of steps (a zero point,
    as TFLite and PyTorch quantize) so that zeros -- most of a ReLU feature
    vector -- read back as exactly 0 and stay one repeated code that compresses;
    one code of slack keeps every value within half a step. Both numbers are
    float32 so that any reader dequantizes (``code * scale + offset`` in float32)
    exactly as dstore does."""
    info = np.iinfo(codes)
    lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
    span = hi64 - lo64
    levels = float(info.max) - float(info.min)
    spans_zero = (lo64 <= 0) & (hi64 >= 0)
    scale = np.where(span > 0, span / np.where(spans_zero, levels - 1, levels), 1.0)
    # a step below float32's smallest subnormal would be 0: subnormals are whole multiples
    # of the smallest one, so that step still holds every value exactly
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    scale = np.maximum(scale.astype(np.float32).astype(np.float64), tiny)
    zero_point = np.clip(np.rint(info.min - lo64 / scale), info.min, info.max)
    # elsewhere the lowest code maps to lo
    offset = np.where(spans_zero, -zero_point * scale, lo64 - info.min * scale)
    with np.errstate(over="ignore"):  # past float32's range: the caller refuses it by name
        return scale.astype(np.float32), offset.astype(np.float32)


def quantize(
    values: np.ndarray, scale: np.ndarray, offset: np.ndarray, codes: np.dtype
) -> np.ndarray:
    """Nearest codes (values broadcast against ``scale``/``offset`` on the last axis)."""
    info = np.iinfo(codes)
    q = np.rint((values.astype(np.float64) - offset.astype(np.float64)) / scale.astype(np.float64))
    return np.clip(q, info.min, info.max).astype(codes)


def dequantize(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray) -> np.ndarray:
    return codes.astype(np.float32) * scale + offset


def quant_record(target: Target, scale: np.ndarray, offset: np.ndarray) -> dict[str, Any]:
    return {
        "policy": target.spec,
        "codes": target.dtype.name if target.dtype is not None else "",
        "axis": -1 if target.per_channel else None,
        "scale": [float(s) for s in np.atleast_1d(scale)],
        "offset": [float(o) for o in np.atleast_1d(offset)],
    }


def quant_arrays(rec: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    try:
        scale = np.asarray(rec["scale"], np.float32)
        offset = np.asarray(rec["offset"], np.float32)
    except (KeyError, TypeError, ValueError) as e:  # a damaged record of a schema without digest
        raise SchemaError(f"the stored int8/uint8 precision record is damaged ({e!r})") from None
    if rec.get("axis") is None:
        return scale.reshape(()), offset.reshape(())
    return scale, offset


@dataclass
class RangeScan:
    """Running finite min/max of one field (per channel when asked) over every split."""

    per_channel: bool
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None

    def update(self, values: np.ndarray) -> None:
        if not values.size:
            return
        v = values.reshape(-1, values.shape[-1]) if self.per_channel else values.reshape(-1, 1)
        lo, hi = v.min(axis=0), v.max(axis=0)
        self.lo = lo if self.lo is None else np.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else np.maximum(self.hi, hi)

    def params(self, codes: np.dtype, channels: int) -> tuple[np.ndarray, np.ndarray]:
        n = channels if self.per_channel else 1
        lo = np.zeros(n) if self.lo is None else self.lo
        hi = np.zeros(n) if self.hi is None else self.hi
        return quant_params(lo, hi, codes)


# ------------------------------------------------------------------ reading back


def dequant_params(spec: FieldSpec) -> tuple[np.ndarray, np.ndarray] | None:
    """float32 (scale, offset) of a field read back from int8/uint8 codes, else None."""
    rec = spec.attrs.get(PRECISION_ATTR)
    if isinstance(rec, Mapping) and str(rec.get("policy", "")).split(":")[0] in _QUANT:
        return quant_arrays(rec)
    return None


def _decoded_kind(spec: FieldSpec, dtype: np.dtype) -> Tensor | Ragged:
    if isinstance(spec.kind, Ragged):
        return Ragged(dtype, spec.kind.inner_shape)
    return Tensor(dtype, spec.shape)


def logical_spec(spec: FieldSpec) -> FieldSpec:
    """The field as dstore reads it: bfloat16 for bfloat16 bits, float32 for int8 codes."""
    rec = spec.attrs.get(PRECISION_ATTR)
    if not isinstance(rec, Mapping) or not isinstance(spec.kind, (Tensor, Ragged)):
        return spec
    policy = str(rec.get("policy", ""))
    if policy == "bfloat16" and spec.dtype.name in ("uint16", "float32"):
        return replace(spec, kind=_decoded_kind(spec, bfloat16_dtype("bfloat16 field")))
    if policy.split(":")[0] in _QUANT and spec.dtype.name == rec.get("codes"):
        return replace(spec, kind=_decoded_kind(spec, np.dtype(np.float32)))
    return spec


def logical_schema(schema: Schema) -> Schema:
    out = schema
    for split in schema.splits.values():
        fields = [logical_spec(f) for f in split.fields.values()]
        if any(f is not g for f, g in zip(fields, split.fields.values(), strict=True)):
            out = out.with_fields(split.name, fields)
    return out


def decode_values(stored: FieldSpec, values: np.ndarray) -> np.ndarray:
    rec = stored.attrs[PRECISION_ATTR]
    if rec["policy"] == "bfloat16":
        bf16 = bfloat16_dtype("bfloat16 field")
        if values.dtype.kind == "u":
            return np.ascontiguousarray(values, values.dtype.newbyteorder("=")).view(bf16)
        return values.astype(bf16)  # float32 widened from bfloat16: exact
    scale, offset = quant_arrays(rec)
    return dequantize(values, scale, offset)


def decode_column(stored: FieldSpec, col: Any) -> Any:
    if isinstance(col, VarColumn):
        return VarColumn(decode_values(stored, col.flat_values), col.offsets, col.shapes)
    return decode_values(stored, col)


def decode_batch(stored: SplitSpec, logical: SplitSpec, batch: Batch) -> Batch:
    return {
        name: decode_column(stored.fields[name], col)
        if logical.fields[name] is not stored.fields[name]
        else col
        for name, col in batch.items()
    }


def tolerance(spec: FieldSpec) -> tuple[str, float, float] | None:
    """The error the stored field declares: (what, absolute bound, relative bound).

    int8/uint8: half a quantization step (absolute); round:N and bfloat16: half
    a unit in the last kept mantissa bit (relative), plus float32's own rounding
    when the source was float64. None for fields stored without a lossy record."""
    rec = spec.attrs.get(PRECISION_ATTR)
    if not isinstance(rec, Mapping):
        return None
    policy = str(rec.get("policy", ""))
    if policy.split(":")[0] in _QUANT:
        step = max(rec.get("scale") or [0.0])
        return f"{policy}: |error| <= scale/2 = {step / 2:.3g}", step / 2 * (1 + 1e-6), 0.0
    bits = BFLOAT16_MANTISSA if policy == "bfloat16" else int(rec.get("keepbits", FLOAT32_MANTISSA))
    rel = 2.0 ** -(bits + 1) + 2.0**-24
    return f"{policy}: relative error <= 2^-{bits + 1}", 0.0, rel


def describe_precision(spec: FieldSpec) -> str:
    """One phrase for ``dstore info``: how the field's values are stored, '' if plainly."""
    rec = spec.attrs.get(PRECISION_ATTR)
    if not isinstance(rec, Mapping):
        return ""
    policy = str(rec.get("policy", ""))
    if policy.split(":")[0] in _QUANT:
        scales = rec.get("scale") or []
        where = f"{len(scales)} channel scales" if rec.get("axis") is not None else "one scale"
        return (
            f"{policy}: {rec.get('codes')} codes, {where} + offset in the schema, read as float32"
        )
    if policy == "bfloat16":
        return f"bfloat16, stored as {rec.get('stored')}"
    return f"{policy}: float32 with {rec.get('keepbits')} mantissa bits"


@dataclass
class ErrorStats:
    """Absolute error of finite values, accumulated over batches."""

    max_abs: float = 0.0
    sum_abs: float = 0.0
    count: int = 0
    max_excess: float = 0.0  # how far past the tolerance the worst value is (0: within)
    nonfinite_mismatch: int = 0
    layout_mismatch: int = 0

    @property
    def mean_abs(self) -> float:
        return self.sum_abs / self.count if self.count else 0.0

    def _update(self, a: np.ndarray, b: np.ndarray, abs_tol: float, rel_tol: float) -> None:
        a64 = np.asarray(a, np.float64)
        b64 = np.asarray(b, np.float64)
        fa, fb = np.isfinite(a64), np.isfinite(b64)
        # NaN stays NaN, inf stays inf: anything else is a difference, not an error size
        self.nonfinite_mismatch += int(
            np.count_nonzero((fa != fb) | (~fa & ~(np.isnan(a64) & np.isnan(b64)) & (a64 != b64)))
        )
        both = fa & fb
        err = np.abs(a64[both] - b64[both])
        if err.size:
            self.max_abs = max(self.max_abs, float(err.max()))
            self.sum_abs += float(err.sum())
            self.count += int(err.size)
            bound = abs_tol + rel_tol * np.abs(a64[both])
            self.max_excess = max(self.max_excess, float((err - bound).max()))

    def update(self, a: Any, b: Any, abs_tol: float, rel_tol: float) -> None:
        """Add the errors of batch columns ``a`` (source) and ``b`` (decoded output)."""
        if isinstance(a, VarColumn) or isinstance(b, VarColumn):
            if not (
                isinstance(a, VarColumn)
                and isinstance(b, VarColumn)
                and np.array_equal(a.offsets, b.offsets)
            ):
                self.layout_mismatch += len(a)
                return
            a, b = a.values, b.values
        self._update(np.asarray(a), np.asarray(b), abs_tol, rel_tol)

    @property
    def within(self) -> bool:
        return self.max_excess <= 0 and not self.nonfinite_mismatch and not self.layout_mismatch

    def verdict(self, records: int, declared: str) -> tuple[bool, str]:
        """(ok, detail) for ``dstore verify``: the error measured against the one declared."""
        measured = f"max abs error {self.max_abs:.3g}, mean abs {self.mean_abs:.3g}"
        if self.layout_mismatch:
            return False, f"{self.layout_mismatch} records differ in length"
        if self.nonfinite_mismatch:
            return False, f"{self.nonfinite_mismatch} NaN/inf value(s) not kept; {measured}"
        if self.max_excess > 0:
            return False, f"error exceeds the declared {declared}: {measured}"
        return True, f"{records} records within the declared {declared}: {measured}"


def column_values(col: Any) -> np.ndarray:
    return col.flat_values if isinstance(col, VarColumn) else np.asarray(col)


def finite_or_raise(values: np.ndarray, where: str, target: str, first: int) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        raise DtypePolicyError(
            f"{where}: {int(np.count_nonzero(bad))} NaN/inf value(s) cannot be {target} codes, "
            f"first at record {first}; use a float policy for this field"
        )
