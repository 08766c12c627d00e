"""dstore columns <-> Arrow arrays, one :class:`Storage` (the manifest's ``fields``) per
field; the table of encodings, Arrow types and Hub features is in docs/formats/parquet.md."""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import CodecIOError
from ...model import Column, Ragged, StringList, VarColumn
from ...model.arrow import is_list, list_lengths, numbers
from ...model.nesting import from_levels, real_dims, to_levels
from ...model.schema import FieldSpec
from .._imagecodec import LOSSY_FORMATS
from .._pixels import FieldStorage, decode_pixel_column, encode_pixels

__all__ = ["Storage", "arrow_type", "from_arrow", "hf_feature", "to_arrow"]

PIXEL_ENCODINGS = ("png", *LOSSY_FORMATS)  # pixels dstore encodes (decoded back on read)
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


class Storage(FieldStorage):
    ENCODINGS = ("value", "image", "string", "binary", "strings", *PIXEL_ENCODINGS)

    @property
    def is_image(self) -> bool:
        return self.encoding == "image" or self.encoding in PIXEL_ENCODINGS


def _text(spec: FieldSpec, s: Storage) -> bool:
    return s.encoding == "string" or (isinstance(spec.kind, StringList) and spec.kind.text)


def arrow_type(spec: FieldSpec, s: Storage) -> pa.DataType:
    if s.is_image:
        return IMAGE_TYPE
    if s.encoding in ("string", "binary", "strings"):
        t = pa.string() if _text(spec, s) else pa.binary()
        return pa.list_(t) if s.encoding == "strings" else t
    dtype, dims = real_dims(spec)
    t = pa.from_numpy_dtype(dtype)
    for d in reversed(dims):  # Arrow has no fixed-size list of 0: variable lists then
        t = pa.list_(t, d) if 0 not in dims else pa.list_(t)
    return pa.list_(t) if isinstance(spec.kind, Ragged) else t


def hf_feature(spec: FieldSpec, s: Storage) -> dict[str, Any]:
    """The column's feature as ``datasets`` writes it in the ``huggingface`` metadata."""

    def wrap(feature: dict[str, Any], length: int | None = None) -> dict[str, Any]:
        return {
            "feature": feature,
            **({} if length is None else {"length": length}),
            "_type": "List",
        }

    if s.is_image:
        return {"_type": "Image"}
    if s.class_names is not None:
        return {"names": list(s.class_names), "_type": "ClassLabel"}
    if s.encoding == "value":
        dtype, dims = real_dims(spec)
        feature = {"dtype": dtype.name, "_type": "Value"}
    else:  # string, binary or a list of them
        dims = ()
        feature = {"dtype": "string" if _text(spec, s) else "binary", "_type": "Value"}
    for d in reversed(dims):
        feature = wrap(feature, d if 0 not in dims else None)
    return wrap(feature) if isinstance(spec.kind, (Ragged, StringList)) else feature


# ------------------------------------------------------------------ dstore -> Arrow


def _buffer(values: np.ndarray) -> pa.Buffer:
    # numbers as an Arrow buffer over the same memory: no copy, and no detour through
    # ``pa.array``, which imports pandas to inspect its argument
    return pa.py_buffer(np.ascontiguousarray(values))


def _binary(col: VarColumn, t: pa.DataType, where: str) -> pa.Array:
    if len(col.offsets) and int(col.offsets[-1]) > 2**31 - 1:  # Arrow's offsets are int32
        raise CodecIOError(f"{where}: more than 2 GiB of values in 16 records")
    offsets = _buffer(col.offsets.astype(np.int32))
    return pa.Array.from_buffers(t, len(col), [None, offsets, _buffer(col.flat_values)])


def _lists(values: pa.Array, lengths: np.ndarray, t: pa.DataType) -> pa.Array:
    """``values`` grouped ``lengths[i]`` at a time, as Arrow type ``t`` (list or fixed-size)."""
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(values, type=t)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), len(offsets), [None, _buffer(offsets)]), values, type=t
    )


def _values(spec: FieldSpec, col: Any, t: pa.DataType) -> pa.Array:
    """Numbers of a Tensor (one ndarray) or Ragged (values + offsets) column, nested."""
    values, levels = to_levels(spec, col)
    types = []
    for _ in levels:
        types.append(t)
        t = t.value_type
    if values.dtype == np.bool_:  # Arrow packs booleans to bits
        data = pa.py_buffer(np.packbits(values, bitorder="little"))
    else:
        data = _buffer(values)
    arr = pa.Array.from_buffers(t, len(values), [None, data])
    for lengths, list_type in zip(reversed(levels), reversed(types), strict=True):
        arr = _lists(arr, lengths, list_type)  # innermost level first
    return arr


def to_arrow(
    spec: FieldSpec, s: Storage, col: Any, t: pa.DataType, png: Any, where: str
) -> tuple[pa.Array, np.ndarray]:
    """One chunk of a field as an Arrow array, and each record's encoded bytes."""
    if s.is_image:
        lossy = s.lossy
        blobs = (
            col
            if s.encoding == "image"
            else encode_pixels(spec, col, lossy.encode if lossy else png)
        )
        paths = pa.nulls(len(blobs), pa.string())
        data = _binary(blobs, pa.binary(), where)
        return pa.StructArray.from_arrays([data, paths], fields=list(t)), blobs.lengths
    if s.encoding in ("string", "binary"):
        return _binary(col, t, where), col.lengths
    if s.encoding == "strings":
        arr = _lists(_binary(col.strings, t.value_type, where), col.lengths, t)
        return arr, np.diff(col.strings.offsets[col.offsets])
    if isinstance(spec.kind, Ragged):
        row = int(np.prod(spec.shape, dtype=np.int64)) * spec.dtype.itemsize
        return _values(spec, col, t), col.lengths * row
    return _values(spec, col, t), np.full(len(col), spec.record_bytes, np.int64)


# ------------------------------------------------------------------ Arrow -> dstore


def _no_nulls(arr: pa.Array, where: str, first: int, what: str = "") -> None:
    if arr.null_count:
        at = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        rec = f"record {first + at}" if not what else f"record {first}+ ({what} {at})"
        raise CodecIOError(f"{where}, {rec}: null value (dstore fields have no missing values)")


def _numbers(spec: FieldSpec, arr: pa.Array, where: str, first: int) -> Column:
    """The numbers under ``arr``'s list levels and each level's lengths."""
    dims = real_dims(spec)[1]
    levels = []
    for depth in range(isinstance(spec.kind, Ragged) + len(dims)):
        _no_nulls(arr, where, first, "" if depth == 0 else f"value at axis {depth}")
        if not is_list(arr.type):
            raise CodecIOError(f"{where}: {arr.type} has fewer axes than the field's {dims}")
        levels.append(list_lengths(arr))
        arr = arr.flatten()
    _no_nulls(arr, where, first, "value")
    return from_levels(spec, numbers(arr), levels, where, first)


def _bytes(arr: pa.Array, where: str, first: int) -> VarColumn:
    """Strings or bytes as values + offsets, without a Python object per record."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.type not in (pa.string(), pa.binary(), pa.large_string(), pa.large_binary()):
        text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
        arr = arr.cast(pa.large_string() if text else pa.large_binary())
    _no_nulls(arr, where, first)
    width = 8 if arr.type in (pa.large_string(), pa.large_binary()) else 4
    _, offsets, data = arr.buffers()
    offsets = np.frombuffer(offsets, f"<i{width}", len(arr) + 1, arr.offset * width)
    values = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
    return VarColumn(values[int(offsets[0]) : int(offsets[-1])], offsets.astype(np.int64))


def from_arrow(
    spec: FieldSpec, s: Storage, arr: Any, where: str, first: int, pool: Executor
) -> Column:
    """The column of field ``spec`` from ``arr`` (records ``first...`` of a shard)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if s.encoding in ("string", "binary"):
        return _bytes(arr, where, first)
    _no_nulls(arr, where, first)
    if s.encoding == "strings":
        offsets = np.concatenate([[0], np.cumsum(list_lengths(arr))]).astype(np.int64)
        return VarColumn(_bytes(arr.flatten(), where, first), offsets)
    if not s.is_image:
        return _numbers(spec, arr, where, first)
    blobs = arr.flatten()[arr.type.get_field_index("bytes")]
    if blobs.null_count:
        at = first + int(np.flatnonzero(blobs.is_null().to_numpy(zero_copy_only=False))[0])
        raise CodecIOError(
            f"{where}, record {at}: an Image with a path and no bytes (dstore never "
            "reads files a dataset points to)"
        )
    col = _bytes(blobs, where, first)
    if s.encoding == "image":
        return col
    return decode_pixel_column(spec, col.to_bytes_list(), s.lossy, where, first, pool)
