"""Arrow arrays of a row group -> dstore columns, checked record by record.

Every conversion names the file, field and record of what it refuses: a
null (dstore has no missing values), a list whose length is not the field's,
an Image struct without bytes (a path alone would send the reader outside
its input), bytes that do not decode to the field's pixels.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import numpy as np
import pyarrow as pa

from ...errors import CodecIOError
from ...model import Column, Ragged, StringList, VarColumn
from ...model.schema import FieldSpec
from ...sharding.reader import DECODE_GROUP
from .._pixels import decode_pixels
from .features import Storage, value_dims

__all__ = ["from_arrow"]

_PLAIN_BYTES = (pa.string(), pa.binary(), pa.large_string(), pa.large_binary())


def _no_nulls(arr: pa.Array, where: str, first: int, what: str = "") -> None:
    if arr.null_count:
        at = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        rec = f"record {first + at}" if not what else f"record {first}+ ({what} {at})"
        raise CodecIOError(f"{where}, {rec}: null value (dstore fields have no missing values)")


def _unnest(
    arr: pa.Array, dims: tuple[int, ...], ragged: bool, where: str, first: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """The numbers under ``arr``'s list levels, each level's lengths checked against
    ``dims``; with ``ragged`` the first level varies and its offsets are returned."""
    offsets = None
    levels: list[int | None] = [None] if ragged else []
    levels += list(dims)
    for depth, want in enumerate(levels):
        _no_nulls(arr, where, first, "" if depth == 0 else f"value at axis {depth}")
        if not (
            pa.types.is_list(arr.type)
            or pa.types.is_large_list(arr.type)
            or pa.types.is_fixed_size_list(arr.type)
        ):
            raise CodecIOError(f"{where}: {arr.type} has fewer axes than the field's {dims}")
        if pa.types.is_fixed_size_list(arr.type):
            lengths = np.full(len(arr), arr.type.list_size, np.int64)
        else:
            lengths = arr.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
        if want is None:
            offsets = np.zeros(len(arr) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
        elif len(lengths) and (bad := np.flatnonzero(lengths != want)).size:
            at = f"record {first + int(bad[0])}" if depth == 0 else f"records from {first}"
            raise CodecIOError(
                f"{where}, {at}: {int(lengths[bad[0]])} values on axis {depth}, the field has {want}"
            )
        arr = arr.flatten()
    _no_nulls(arr, where, first, "value")
    return arr.to_numpy(zero_copy_only=False), offsets


def _numbers(spec: FieldSpec, arr: pa.Array, where: str, first: int) -> Column:
    dtype, dims = value_dims(spec)
    ragged = isinstance(spec.kind, Ragged)
    skip = dims[len(spec.shape) :]  # a complex number's pair is an axis too
    values, offsets = _unnest(arr, spec.shape + skip, ragged, where, first)
    values = np.ascontiguousarray(values)
    if spec.dtype.kind == "c":
        values = values.astype(dtype, copy=False).view(spec.dtype.newbyteorder("="))
    values = values.astype(spec.dtype, copy=False)
    if offsets is None:
        return values.reshape(len(arr), *spec.shape)
    return VarColumn(values.reshape(int(offsets[-1]), *spec.shape), offsets)


def _bytes(arr: pa.Array, where: str, first: int) -> VarColumn:
    """Strings or bytes as values + offsets, without a Python object per record."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if arr.type not in _PLAIN_BYTES:
        text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
        arr = arr.cast(pa.large_string() if text else pa.large_binary())
    _no_nulls(arr, where, first)
    large = arr.type in (pa.large_string(), pa.large_binary())
    bufs = arr.buffers()
    width = 8 if large else 4
    offsets = np.frombuffer(bufs[1], f"<i{width}", len(arr) + 1, arr.offset * width)
    data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else np.empty(0, np.uint8)
    return VarColumn(data[int(offsets[0]) : int(offsets[-1])], offsets.astype(np.int64))


def _string_lists(arr: pa.Array, where: str, first: int) -> VarColumn:
    _no_nulls(arr, where, first)
    lengths = arr.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(arr) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return VarColumn(_bytes(arr.flatten(), where, first), offsets)


def _image_bytes(arr: pa.Array, where: str, first: int) -> VarColumn:
    """The ``bytes`` of each Hub Image struct; a record with only a ``path`` is refused."""
    _no_nulls(arr, where, first)
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    blobs = arr.flatten()[names.index("bytes")]
    if blobs.null_count:
        at = first + int(np.flatnonzero(blobs.is_null().to_numpy(zero_copy_only=False))[0])
        raise CodecIOError(
            f"{where}, record {at}: an Image with a path and no bytes (dstore never "
            "reads files a dataset points to)"
        )
    return _bytes(blobs, where, first)


def _pixels(
    spec: FieldSpec, storage: Storage, blobs: VarColumn, where: str, first: int, pool: Executor
) -> Column:
    lossy = storage.lossy
    items = blobs.to_bytes_list()

    def group(lo: int) -> list[np.ndarray]:
        return [
            decode_pixels(b, spec, lossy, f"{where}, record {first + lo + i}")
            for i, b in enumerate(items[lo : lo + DECODE_GROUP])
        ]

    imgs = [im for part in pool.map(group, range(0, len(items), DECODE_GROUP)) for im in part]
    if spec.dense:
        out = np.empty((len(imgs), *spec.shape), spec.dtype)
        for i, im in enumerate(imgs):
            out[i] = im
        return out
    return VarColumn.from_shaped(imgs, spec.dtype)


def from_arrow(
    spec: FieldSpec, storage: Storage, arr: Any, where: str, first: int, pool: Executor
) -> Column:
    """The column of field ``spec`` from ``arr`` (records ``first...`` of a shard)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    enc = storage.encoding
    if storage.is_image:
        blobs = _image_bytes(arr, where, first)
        return blobs if enc == "image" else _pixels(spec, storage, blobs, where, first, pool)
    if enc in ("string", "binary"):
        return _bytes(arr, where, first)
    if enc == "strings":
        assert isinstance(spec.kind, StringList)
        return _string_lists(arr, where, first)
    if not spec.shape and not isinstance(spec.kind, Ragged) and spec.dtype.kind != "c":
        _no_nulls(arr, where, first)
        values = arr.to_numpy(zero_copy_only=False)
        return np.ascontiguousarray(values).astype(spec.dtype, copy=False)
    return _numbers(spec, arr, where, first)
