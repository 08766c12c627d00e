"""JSON values as dstore columns: the format's member names, each field's kind inferred from its values, numbers both ways."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import SchemaError
from ...model import Bytes, Column, Image, Kind, Ragged, String, Tensor, VarColumn, infer_column
from ...model.schema import DEFAULT_SPLIT, Schema
from .parse import _INT_RANGE

#: Member holding dstore's schema (a JSON Lines file's last line).
SCHEMA_MEMBER = "dstore:schema"
#: Schema attribute naming the member the default split's records came from.
RECORDS_ATTR = "json.records"


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "null"


def _first_disagreeing(values: list[Any], test: Callable[[Any], bool]) -> int | None:
    return next((i for i, v in enumerate(values) if not test(v)), None)


def _infer_field(values: list[Any], where: str) -> tuple[Kind, Column]:
    """The kind of one field's values (a record each) and the column of them."""
    first = values[0]

    def refuse(i: int) -> SchemaError:
        return SchemaError(
            f"{where}, record {i}: {_type_name(values[i])}, but record 0 is {_type_name(first)} "
            "(every record of a field must hold the same kind of value)"
        )

    if isinstance(first, bool):
        bad = _first_disagreeing(values, lambda v: isinstance(v, bool))
        if bad is not None:
            raise refuse(bad)
        return Tensor(np.dtype(bool), ()), np.array(values, dtype=bool)
    if isinstance(first, (int, float)):
        bad = _first_disagreeing(
            values, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
        )
        if bad is not None:
            raise refuse(bad)
        if all(isinstance(v, int) for v in values):
            lo, hi = _INT_RANGE[0], 2**63 - 1
            bad = _first_disagreeing(values, lambda v: lo <= v <= hi)
            if bad is not None:
                raise SchemaError(
                    f"{where}, record {bad}: the integer {values[bad]} does not fit in int64"
                )
            return Tensor(np.dtype(np.int64), ()), np.array(values, dtype=np.int64)
        return Tensor(np.dtype(np.float64), ()), np.array(values, dtype=np.float64)
    if isinstance(first, str):
        bad = _first_disagreeing(values, lambda v: isinstance(v, str))
        if bad is not None:
            raise refuse(bad)
        return String(), VarColumn.from_strings(values)
    if isinstance(first, list):
        bad = _first_disagreeing(values, lambda v: isinstance(v, list))
        if bad is not None:
            raise refuse(bad)
        # one fast path for the common case: equal-length lists of numbers
        try:
            arr = np.array(values)
        except (ValueError, OverflowError):
            arr = None
        if arr is not None and arr.dtype.kind in "bif" and arr.ndim >= 2:
            return Tensor(arr.dtype, arr.shape[1:]), arr
        return infer_column([_numeric(v, where, i) for i, v in enumerate(values)], where)
    if first is None:
        raise SchemaError(f"{where}, record 0: null (a missing value) is not supported")
    raise SchemaError(f"{where}, record 0: nested objects are not supported")


def _numeric(value: list[Any], where: str, i: int) -> np.ndarray:
    try:
        arr = np.array(value)
    except (ValueError, OverflowError) as e:
        raise SchemaError(f"{where}, record {i}: not a rectangular list of numbers ({e})") from None
    if arr.dtype.kind not in "bif" and arr.size:
        raise SchemaError(
            f"{where}, record {i}: the list holds something else than numbers "
            "(lists of numbers only)"
        )
    if arr.size == 0:
        arr = arr.astype(np.int64)  # an empty list says nothing; the others decide
    return arr if arr.ndim else arr.reshape(1)


def _bits_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"{dtype.byteorder if dtype.byteorder in '<>' else '='}u{dtype.itemsize}")


def _numbers(values: Any, dtype: np.dtype) -> np.ndarray:
    """JSON numbers (nested lists) as an array of ``dtype``. Complex values are
    ``[re, im]`` pairs; a NaN whose bits are not numpy's NaN is the string
    ``"nan:0x<bits>"`` (written so by :func:`_json_numbers`)."""
    target = dtype
    if dtype.kind == "c":  # parts of the same byte order and half the size
        order = dtype.byteorder if dtype.byteorder in "<>" else "="
        target = np.dtype(f"{order}f{dtype.itemsize // 2}")
    try:
        arr = np.array(values, dtype=target)
    except ValueError:  # NaN payloads as strings: only in dstore's own float fields
        if target.kind != "f":
            raise
        obj = np.array(values, dtype=object)
        texts = np.frompyfunc(lambda v: isinstance(v, str), 1, 1)(obj).astype(bool)
        arr = np.zeros(obj.shape, target)
        arr[~texts] = obj[~texts].astype(target)
        if texts.any():
            bits = [int(str(t).removeprefix("nan:"), 16) for t in obj[texts]]
            arr[texts] = np.array(bits, _bits_dtype(target)).view(target)
    if dtype.kind == "c":
        if arr.size == 0:  # no pair to pair up: the caller gives the shape
            return np.zeros(0, dtype)
        arr = np.ascontiguousarray(arr).view(dtype)[..., 0]
    return arr


def _json_numbers(arr: np.ndarray) -> Any:
    """An array as nested lists of JSON numbers; the inverse of :func:`_numbers`."""
    if arr.dtype.kind == "c":
        part = arr.dtype.byteorder if arr.dtype.byteorder in "<>" else "="
        arr = (
            np.ascontiguousarray(arr)
            .view(f"{part}f{arr.dtype.itemsize // 2}")
            .reshape((*arr.shape, 2))
        )
    if arr.dtype.kind == "f":
        nan = np.isnan(arr)
        if nan.any():
            bits = arr.view(_bits_dtype(arr.dtype))
            odd = nan & (bits != np.array(np.nan, arr.dtype).view(_bits_dtype(arr.dtype)))
            if odd.any():  # a payload or sign JSON's NaN cannot carry
                width = arr.dtype.itemsize * 2
                obj = arr.astype(object)
                obj[odd] = [f"nan:0x{int(b):0{width}x}" for b in bits[odd]]
                return obj.tolist()
    return arr.tolist()


def _column_of(kind: Kind, values: list[Any], where: str) -> Column:
    """Values of one field as a column of the kind dstore's schema names."""
    try:
        if isinstance(kind, Tensor) or (isinstance(kind, Image) and kind.is_dense):
            shape = kind.shape if isinstance(kind, Tensor) else (kind.shape or ())
            arr = _numbers(values, kind.value_dtype)
            if arr.shape != (len(values), *shape):
                arr = arr.reshape((len(values), *shape))
            return arr
        if isinstance(kind, String):
            return VarColumn.from_strings(values)
        if isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw"):
            return VarColumn.from_bytes(base64.b64decode(v, validate=True) for v in values)
        if isinstance(kind, Ragged):
            rows = [_numbers(v, kind.dtype).reshape((-1, *kind.inner_shape)) for v in values]
            return VarColumn.from_rows(rows, kind.dtype, kind.inner_shape)
        if isinstance(kind, Image):  # raw pixels of varying size: nested lists
            arrays = [np.array(v, dtype=kind.dtype) for v in values]
            flat = VarColumn.from_rows([a.reshape(-1) for a in arrays], kind.dtype)
            ndim = 2 if kind.channels == 0 else 3
            shapes = np.array([a.shape for a in arrays], np.int64).reshape(len(arrays), ndim)
            return VarColumn(flat.values, flat.offsets, shapes)
    except (ValueError, TypeError, OverflowError) as e:
        raise SchemaError(f"{where}: values do not fit {kind.describe()}: {e}") from None
    raise SchemaError(f"{where}: {kind.describe()} fields are not supported in JSON")


def _records_key(schema: Schema, split: str) -> str:
    """The member holding a split's records: its name, or for the default split the
    member it was read from (pyspacer's ``point_features``)."""
    if split == DEFAULT_SPLIT:
        return str(schema.attrs.get(RECORDS_ATTR, DEFAULT_SPLIT))
    return split


def _columns(
    records: list[dict[str, Any]], where: str, kinds: dict[str, Kind] | None
) -> tuple[dict[str, Kind], dict[str, Column]]:
    """Records (objects) to columns: kinds given by dstore's schema, else inferred."""
    names: list[str] = list(kinds) if kinds is not None else list(records[0]) if records else []
    values: dict[str, list[Any]] = {n: [] for n in names}
    for i, rec in enumerate(records):
        if len(rec) != len(names) or any(n not in rec for n in names):
            missing = [n for n in names if n not in rec]
            extra = [k for k in rec if k not in values]
            what = f"has no field {missing[0]!r}" if missing else f"has an extra field {extra[0]!r}"
            raise SchemaError(f"{where}, record {i} {what} (record 0 has {names})")
        for n in names:
            values[n].append(rec[n])
    out_kinds: dict[str, Kind] = {}
    cols: dict[str, Column] = {}
    for n in names:
        fwhere = f"{where}, field {n!r}"
        if kinds is not None:
            out_kinds[n], cols[n] = kinds[n], _column_of(kinds[n], values[n], fwhere)
        else:
            out_kinds[n], cols[n] = _infer_field(values[n], fwhere)
    return out_kinds, cols
