"""Kinds inferred from values a user or a foreign file hands over.

* numeric ndarray -> :class:`Tensor` (its per-record shape);
* numpy ``<U`` arrays -> :class:`String`, ``S`` arrays -> :class:`Bytes`
  (fixed-width on disk in npz; held as values + offsets, trailing NULs
  stripped the way numpy strips them);
* a list of ``str`` / ``bytes`` -> String / Bytes;
* a list of lists of ``str`` (or of ``bytes``) -> :class:`StringList`;
* a list (or object array) of numeric arrays whose first axis varies ->
  :class:`Ragged`; if they all have one shape, a Tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import SchemaError
from .columns import Column, VarColumn
from .kinds import Bytes, Kind, Ragged, String, StringList, Tensor, check_numeric_dtype

__all__ = ["infer_column", "kind_of_axes", "numpy_strings_to_column"]

#: numpy's limit on dimensions (a field's records share it with the record axis)
_MAX_RECORD_DIMS = 64


def numpy_strings_to_column(arr: np.ndarray, where: str) -> tuple[Kind, VarColumn]:
    """A 1-d ``<U``/``S`` array as a String/Bytes column (numpy's trailing-NUL rule)."""
    if arr.ndim != 1:
        raise SchemaError(f"{where}: string arrays need one record axis; got shape {arr.shape}")
    if arr.dtype.kind == "U":
        return String(), VarColumn.from_strings(str(s) for s in arr.tolist())
    return Bytes(), VarColumn.from_bytes(bytes(b) for b in arr.tolist())


def kind_of_axes(dtype: np.dtype, axes: Sequence[int | None]) -> Kind | None:
    """The numeric kind of records whose axes have these lengths in every record (None
    where a length varies): a Tensor, a Ragged when only the first varies, else None."""
    if all(n is not None for n in axes):
        return Tensor(dtype, tuple(int(n or 0) for n in axes))
    if any(n is None for n in axes[1:]):
        return None
    return Ragged(dtype, tuple(int(n or 0) for n in axes[1:]))


def infer_column(data: Any, where: str) -> tuple[Kind, Column]:
    """The kind of ``data`` and ``data`` as a column of it."""
    if isinstance(data, VarColumn):
        raise SchemaError(f"{where}: a VarColumn needs its kind given explicitly")
    if isinstance(data, np.ndarray) and data.dtype.kind in "US":
        return numpy_strings_to_column(data, where)
    if isinstance(data, np.ndarray) and data.dtype.kind != "O":
        if data.ndim == 0:
            raise SchemaError(f"{where}: 0-d array has no record axis")
        return Tensor(check_numeric_dtype(data.dtype, where), data.shape[1:]), data
    items: list[Any] = list(data) if isinstance(data, (list, tuple, np.ndarray)) else []
    if not isinstance(data, (list, tuple, np.ndarray)):
        raise SchemaError(
            f"{where}: expected an array or a list of records, got {type(data).__name__}"
        )
    if not items:
        raise SchemaError(
            f"{where}: an empty list has no kind; pass an empty array of the right dtype"
        )
    text = _text_column(items, where)
    if text is not None:
        return text
    return _numeric_column(_record_arrays(items, where), where)


def _text_column(items: list[Any], where: str) -> tuple[Kind, Column] | None:
    """Records of str, of bytes, or lists of either, as their column; None for records
    that are not text (a mix of text and other records is refused)."""
    if all(isinstance(s, str) for s in items):
        return String(), VarColumn.from_strings(items)
    if all(isinstance(b, (bytes, bytearray)) for b in items):
        return Bytes(), VarColumn.from_bytes(bytes(b) for b in items)
    lists = _string_lists(items)
    if lists is not None:
        return lists
    if isinstance(items[0], (str, bytes, bytearray)):
        text = isinstance(items[0], str)
        bad = next(
            i
            for i, v in enumerate(items)
            if isinstance(v, str) != text or not isinstance(v, (str, bytes, bytearray))
        )
        raise SchemaError(
            f"{where}, record {bad}: {type(items[bad]).__name__} among {'str' if text else 'bytes'} records"
        )
    return None


def _record_arrays(items: list[Any], where: str) -> list[np.ndarray]:
    """Each numeric record as an array of at least one dimension; a record that is not
    one is refused by number."""
    arrays = []
    for i, item in enumerate(items):
        if isinstance(item, (str, bytes, bytearray)) or item is None:
            raise SchemaError(f"{where}, record {i}: {type(item).__name__} among numeric records")
        try:
            a = np.asarray(item)
        except ValueError as e:  # nested lists of unequal length
            raise SchemaError(f"{where}, record {i}: not a rectangular array ({e})") from None
        if a.dtype.kind == "O":
            raise SchemaError(f"{where}, record {i}: not a numeric array")
        if a.ndim == 0:
            a = a.reshape(1)
        if a.ndim >= _MAX_RECORD_DIMS:
            # a field adds the record axis: numpy's 64 dimensions would be exceeded
            raise SchemaError(
                f"{where}, record {i}: {a.ndim} dimensions; a record has at most "
                f"{_MAX_RECORD_DIMS - 1} (numpy's {_MAX_RECORD_DIMS} with the record axis)"
            )
        arrays.append(a)
    return arrays


def _numeric_column(arrays: list[np.ndarray], where: str) -> tuple[Kind, Column]:
    """Records of one shape as a Tensor, of one inner shape as Ragged."""
    dtype = np.result_type(*arrays)
    check_numeric_dtype(dtype, where)
    inner = {a.shape[1:] for a in arrays}
    if len(inner) > 1:
        bad = next(i for i, a in enumerate(arrays) if a.shape[1:] != arrays[0].shape[1:])
        raise SchemaError(
            f"{where}, record {bad}: shape {arrays[bad].shape}, record 0 has "
            f"{arrays[0].shape}: a ragged field's inner shape cannot change (only the first "
            "axis may vary)"
        )
    if len({a.shape for a in arrays}) == 1:
        return Tensor(dtype, arrays[0].shape), np.stack(arrays).astype(dtype, copy=False)
    kind = Ragged(dtype, inner.pop())
    return kind, VarColumn.from_rows(arrays, dtype, kind.inner_shape)


def _string_lists(items: Sequence[Any]) -> tuple[Kind, Column] | None:
    """Records that are lists of str (or of bytes), at least one string among them."""
    if not all(isinstance(r, (list, tuple)) for r in items):
        return None
    flat = [s for r in items for s in r]
    if not flat or not all(isinstance(s, (str, bytes, bytearray)) for s in flat):
        return None
    text = isinstance(flat[0], str)
    if not all(isinstance(s, str) == text for s in flat):
        raise SchemaError("lists of strings mix str and bytes; choose one")
    return StringList(text), VarColumn.from_lists(items)
