"""How :func:`~dstore.api.verify.verify` compares two columns: bit for bit where the
data should be equal, by pixel error (PSNR) where a lossy encoding was chosen."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..model import Column, Kind, Ragged, Tensor, VarColumn
from ..model.precision import is_floating


def record_bytes(a: np.ndarray) -> np.ndarray:
    """Each record as a row of its bytes (native order), so that values compare by bits:
    NaN payloads, -0.0 and both halves of complex numbers all count."""
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))
    return a.view(np.uint8).reshape(
        len(a), int(np.prod(a.shape[1:], dtype=np.int64)) * a.dtype.itemsize
    )


def compare_records(a: Column, b: Column) -> np.ndarray:
    """Per-record bit equality; float values in ``b`` may be ``a`` cast to another float dtype
    (then ``a`` is rounded the way a dtype policy rounds it, and the bits are compared)."""
    if isinstance(a, VarColumn) or isinstance(b, VarColumn):
        if not (isinstance(a, VarColumn) and isinstance(b, VarColumn)):
            return np.zeros(len(a), bool)
        return compare_var_records(a, b)
    if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
        with np.errstate(over="ignore", invalid="ignore"):
            a = a.astype(b.dtype)
    return (record_bytes(a) == record_bytes(b)).all(axis=1)


def compare_var_records(a: VarColumn, b: VarColumn) -> np.ndarray:
    """:func:`compare_records` of two variable-length columns (ragged, strings, lists of strings)."""
    same = a.lengths == b.lengths
    if isinstance(a.values, VarColumn) or isinstance(b.values, VarColumn):
        # lists of strings: a record is equal when each of its strings is
        if not (isinstance(a.values, VarColumn) and isinstance(b.values, VarColumn)):
            return np.zeros(len(a), bool)
        for i in np.flatnonzero(same):
            same[i] = bool(
                compare_records(
                    a.values.slice(int(a.offsets[i]), int(a.offsets[i + 1])),
                    b.values.slice(int(b.offsets[i]), int(b.offsets[i + 1])),
                ).all()
            )
        return same
    if a.shapes is not None or b.shapes is not None:
        same &= a.shapes is not None and b.shapes is not None and np.array_equal(a.shapes, b.shapes)
    if a.values.dtype == np.uint8 and b.values.dtype == np.uint8:
        # byte strings: each record compared in place (an elementwise comparison of
        # the whole batch would take its values' size twice more, in bools)
        av, bv = np.ascontiguousarray(a.values).data, np.ascontiguousarray(b.values).data
        for i in np.flatnonzero(same):
            ao, bo = int(a.offsets[i]), int(b.offsets[i])
            same[i] = av[ao : int(a.offsets[i + 1])] == bv[bo : int(b.offsets[i + 1])]
        return same
    eq_values = (
        compare_records(a.values, b.values) if np.array_equal(a.offsets, b.offsets) else None
    )
    for i in np.flatnonzero(same):
        lo, hi = int(a.offsets[i]), int(a.offsets[i + 1])
        if eq_values is not None:
            same[i] = bool(eq_values[lo:hi].all())
        else:
            b_record = b.values[int(b.offsets[i]) : int(b.offsets[i + 1])]
            same[i] = bool(compare_records(a.values[lo:hi], b_record).all())
    return same


def same_kind_but_float_width(ka: Kind, kb: Kind) -> bool:
    """Kinds equal, or equal but for the float dtype a dtype policy changes."""
    if ka == kb:
        return True
    if isinstance(ka, Tensor) and isinstance(kb, Tensor):
        return ka.shape == kb.shape and is_floating(ka.dtype) and is_floating(kb.dtype)
    if isinstance(ka, Ragged) and isinstance(kb, Ragged):
        return ka.inner_shape == kb.inner_shape and is_floating(ka.dtype) and is_floating(kb.dtype)
    return False


def lossy_error_stats(dtype: np.dtype) -> Any:
    from ..images.imagecodec import ErrorStats

    return ErrorStats(dtype)


def measure_pixel_error(a: Column, b: Column, stats: Any) -> np.ndarray:
    """Accumulate the pixel error of ``b`` against ``a`` into ``stats``; per record, True
    where the two records have the same shape (a shape that differs is a mismatch)."""
    if isinstance(a, VarColumn) or isinstance(b, VarColumn):
        if not (isinstance(a, VarColumn) and isinstance(b, VarColumn)):
            return np.zeros(len(a), bool)
        same = a.lengths == b.lengths
        if a.shapes is not None and b.shapes is not None:
            same &= (a.shapes == b.shapes).all(axis=1)
        for i in np.flatnonzero(same).tolist():
            stats.update(a.row(i), b.row(i))
        return same
    if a.shape != b.shape:
        return np.zeros(len(a), bool)
    stats.update(a, b)
    return np.ones(len(a), bool)
