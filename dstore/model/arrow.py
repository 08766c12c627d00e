"""dstore <-> Arrow. A field's Arrow type and its columns as Arrow arrays and back (the
encodings below; Parquet stores them, :meth:`dstore.api.views.Split.to_arrow` hands them
to Polars, DuckDB and pandas), and the kinds of Arrow columns dstore did not write
(Parquet of ``datasets``, pandas, Spark; anything that speaks Arrow), helped by the
``huggingface`` features metadata ``datasets`` writes. The mapping is in
docs/formats/parquet.md; a column of no kind is refused by name, or dropped and noted.
Imported only by what reads or writes Arrow (pyarrow).

Encodings: ``value`` numbers as (fixed-size) lists per axis, ``image`` encoded images as
the Hub's Image struct ``{bytes, path}``, ``string``/``binary``, ``strings`` a list of
them per record."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from ..bounded_json import load_json
from ..errors import CodecIOError, SchemaError
from .columns import Column, VarColumn
from .infer import kind_of_axes
from .kinds import Bytes, Image, Kind, Ragged, String, StringList, Tensor
from .nesting import from_levels, image_axes, real_dims, to_levels
from .schema import Batch, FieldSpec

__all__ = [
    "ENCODINGS",
    "IMAGE_TYPE",
    "arrow_encoding",
    "arrow_fields",
    "arrow_schema",
    "arrow_table",
    "arrow_type",
    "batch_to_arrow",
    "from_arrow",
    "is_list",
    "is_text",
    "list_axes",
    "list_lengths",
    "numbers",
    "record_sizes",
    "to_arrow",
]

ENCODINGS = ("value", "image", "string", "binary", "strings")
#: an Image as ``datasets`` holds it: the encoded bytes, or the path of a file
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
_ENCODING = {String: "string", Bytes: "binary", StringList: "strings"}

#: (kind, encoding: value/image/string/binary/strings, class names) of a column
Mapped = tuple[Kind, str, tuple[str, ...] | None]


class _Unmapped(Exception):
    """A column of no kind (the message says what it is)."""


def is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def numbers(arr: pa.Array) -> np.ndarray:
    """The values of a primitive Arrow array (its nulls not looked at) as numpy, a view but
    for booleans; ``Array.to_numpy`` imports pandas, a second or more in a fresh process
    such as each DataLoader worker."""
    data = arr.buffers()[1]
    if pa.types.is_boolean(arr.type):
        bits = np.frombuffer(data, np.uint8) if data is not None else np.empty(0, np.uint8)
        bits = np.unpackbits(bits, count=arr.offset + len(arr), bitorder="little")
        return bits[arr.offset :].astype(np.bool_)
    dtype = np.dtype(arr.type.to_pandas_dtype())
    if data is None:
        return np.empty(0, dtype)
    return np.frombuffer(data, dtype, len(arr), arr.offset * dtype.itemsize)


def list_lengths(arr: pa.Array) -> np.ndarray:
    """The length of each list of a list array (int64)."""
    if pa.types.is_fixed_size_list(arr.type):
        return np.full(len(arr), arr.type.list_size, np.int64)
    return numbers(arr.value_lengths()).astype(np.int64)


def list_axes(arrays: Iterable[pa.Array], depth: int) -> list[int | None]:
    """Per list level of ``arrays`` (one column, in parts): the one length every entry
    has, or None when they vary (an empty level counts as length 0)."""
    seen: list[set[int]] = [set() for _ in range(depth)]
    for part in arrays:
        arr = part
        for level in range(depth):
            if len(arr):
                seen[level].update(int(n) for n in np.unique(list_lengths(arr.drop_null())))
            elif pa.types.is_fixed_size_list(arr.type):
                seen[level].add(arr.type.list_size)
            arr = arr.flatten()
    return [next(iter(s)) if len(s) == 1 else (0 if not s else None) for s in seen]


def _texty(t: pa.DataType) -> type | None:
    t = t.value_type if pa.types.is_dictionary(t) else t
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return String
    binary = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_fixed_size_binary)
    return Bytes if any(f(t) for f in binary) or pa.types.is_binary_view(t) else None


def _scalar(t: pa.DataType) -> np.dtype | None:
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.dtype(t.to_pandas_dtype())
    return None


def _check_image_struct(t: pa.StructType, hf_type: Any) -> None:
    """Refuse a struct that is not the Hub's Image: binary ``bytes`` and a ``path``."""
    parts = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    if parts.keys() != {"bytes", "path"} or hf_type not in (None, "Image"):
        raise _Unmapped(f"a struct ({hf_type or t})")
    if _texty(parts["bytes"]) is not Bytes:
        raise _Unmapped(f"an Image struct whose 'bytes' are {parts['bytes']}, not binary")


def _kind(
    t: pa.DataType, feature: Any, axes: Callable[[int], list[int | None]], image: Callable[[], str]
) -> Mapped:
    hf_type = feature.get("_type") if isinstance(feature, dict) else None
    if pa.types.is_struct(t):
        _check_image_struct(t, hf_type)
        return Image(np.dtype(np.uint8), None, None, None, image()), "image", None
    if (text := _texty(t)) is not None:
        return text(), "string" if text is String else "binary", None
    if (dtype := _scalar(t)) is not None:
        names = feature.get("names") if hf_type == "ClassLabel" else None
        ok = isinstance(names, list) and all(isinstance(n, str) for n in names)
        return Tensor(dtype), "value", tuple(names) if ok else None  # type: ignore[arg-type]
    if not is_list(t):
        raise _Unmapped(str(t))
    depth, inner = 0, t
    while is_list(inner):
        inner, depth = inner.value_type, depth + 1
    if (text := _texty(inner)) is not None:
        if depth != 1:
            raise _Unmapped(f"lists of {inner} nested {depth} deep")
        return StringList(text is String), "strings", None
    if (dtype := _scalar(inner)) is None:
        raise _Unmapped(f"lists of {inner}")
    if (kind := kind_of_axes(dtype, axes(depth))) is None:
        raise _Unmapped("lists whose length varies below their first axis")
    return kind, "value", None


def _hf_features(schema: pa.Schema, where: str) -> tuple[dict[str, Any], list[str]]:
    """The ``features`` of the ``huggingface`` metadata ``datasets`` writes (what the
    columns are: Image, ClassLabel...), {} without it. Metadata that does not read
    (not JSON, too large, nested too deeply, another shape) is left aside with a note:
    the columns' Arrow types still say what they hold."""
    raw = (schema.metadata or {}).get(b"huggingface")
    if not raw:
        return {}, []
    try:
        features = load_json(raw, where, "its 'huggingface' metadata")["info"]["features"]
    except CodecIOError as e:
        return {}, [f"{e}: ignored"]
    except (KeyError, TypeError):
        features = None
    if not isinstance(features, dict):
        return {}, [f"{where}: its 'huggingface' metadata has no info.features: ignored"]
    return features, []


def arrow_fields(
    schema: pa.Schema,
    where: str,
    drop: bool,
    axes: Callable[[str, int], list[int | None]],
    image: Callable[[str], str],
) -> tuple[dict[str, FieldSpec], dict[str, Mapped], list[str]]:
    """Fields of the columns of ``schema``, each one's mapping, and notes (dropped columns).

    ``axes(column, depth)`` reads the one length each list level has in every record
    (None where it varies); ``image(column)`` the encoding (png, jpeg...) of its Images."""
    features, notes = _hf_features(schema, where)
    fields: dict[str, FieldSpec] = {}
    mapped: dict[str, Mapped] = {}
    for f in schema:
        try:
            kind, enc, names = _kind(
                f.type, features.get(f.name), partial(axes, f.name), partial(image, f.name)
            )
        except _Unmapped as e:
            what = f"{where}: column {f.name!r} is {e}, which dstore cannot map"
            if not drop:
                raise SchemaError(f"{what}; drop such columns with -o drop_unmapped=true") from None
            notes.append(f"{what}: dropped")
            continue
        attrs = {"user": {"class_names": {"json": list(names)}}} if names else {}
        fields[f.name] = FieldSpec(f.name, kind, attrs=attrs)
        mapped[f.name] = (kind, enc, names)
    return fields, mapped, notes


# ------------------------------------------------------------------ a field's Arrow type


def arrow_encoding(spec: FieldSpec) -> str:
    """How a field is held in Arrow as it is in memory (encoded images as Image structs,
    raw pixels as nested lists of numbers)."""
    if isinstance(spec.kind, Image) and spec.kind.encoding != "raw":
        return "image"
    return _ENCODING.get(type(spec.kind), "value")


def is_text(spec: FieldSpec, encoding: str) -> bool:
    return encoding == "string" or (isinstance(spec.kind, StringList) and spec.kind.text)


def arrow_type(spec: FieldSpec, encoding: str) -> pa.DataType:
    if encoding == "image":
        return IMAGE_TYPE
    if encoding in ("string", "binary", "strings"):
        t = pa.string() if is_text(spec, encoding) else pa.binary()
        return pa.list_(t) if encoding == "strings" else t
    dtype, dims = real_dims(spec)
    t = pa.float32() if dtype.name == "bfloat16" else pa.from_numpy_dtype(dtype)
    for _ in range(image_axes(spec)):
        t = pa.list_(t)
    for d in reversed(dims):  # Arrow has no fixed-size list of 0: variable lists then
        t = pa.list_(t, d) if 0 not in dims else pa.list_(t)
    return pa.list_(t) if isinstance(spec.kind, Ragged) else t


def arrow_schema(
    fields: dict[str, FieldSpec], encodings: dict[str, str], metadata: Any = None
) -> pa.Schema:
    """The Arrow schema of ``fields`` held as ``encodings`` (by field name, in its order)."""
    return pa.schema(
        [pa.field(n, arrow_type(fields[n], e)) for n, e in encodings.items()], metadata=metadata
    )


# ------------------------------------------------------------------ dstore -> Arrow


def _buffer(values: np.ndarray) -> pa.Buffer:
    # numbers as an Arrow buffer over the same memory: no copy, and no detour through
    # ``pa.array``, which imports pandas to inspect its argument
    return pa.py_buffer(np.ascontiguousarray(values))


def _binary(col: VarColumn, t: pa.DataType, where: str) -> pa.Array:
    if len(col.offsets) and int(col.offsets[-1]) > 2**31 - 1:  # Arrow's offsets are int32
        raise CodecIOError(f"{where}: more than 2 GiB of values in {len(col)} records")
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
    """Numbers of a Tensor (one ndarray), Ragged (values + offsets) or raw Image column
    of varying size (values + offsets + shapes), nested."""
    values, levels = to_levels(spec, col)
    if values.dtype.name == "bfloat16":  # Arrow has no bfloat16: float32 holds it exactly
        values = values.astype(np.float32)
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


def to_arrow(spec: FieldSpec, encoding: str, col: Any, where: str) -> pa.Array:
    """A column of field ``spec`` (``image``: its encoded bytes) as an Arrow array."""
    t = arrow_type(spec, encoding)
    if encoding == "image":
        data = _binary(col, pa.binary(), where)
        return pa.StructArray.from_arrays([data, pa.nulls(len(col), pa.string())], fields=list(t))
    if encoding in ("string", "binary"):
        return _binary(col, t, where)
    if encoding == "strings":
        return _lists(_binary(col.strings, t.value_type, where), col.lengths, t)
    return _values(spec, col, t)


def record_sizes(spec: FieldSpec, encoding: str, col: Any) -> np.ndarray:
    """The bytes of each record's values in Arrow (int64)."""
    if encoding == "strings":
        return np.diff(col.strings.offsets[col.offsets])
    if isinstance(col, VarColumn):
        row = int(np.prod(spec.shape, dtype=np.int64)) * spec.dtype.itemsize
        return col.lengths * (1 if encoding != "value" else row)
    return np.full(len(col), spec.record_bytes, np.int64)


def batch_to_arrow(
    fields: dict[str, FieldSpec], encodings: dict[str, str], batch: Batch, where: str
) -> tuple[dict[str, pa.Array], np.ndarray]:
    """A batch's columns held as ``encodings`` as Arrow arrays, with each record's size;
    errors name ``where`` and the field."""
    sizes = np.zeros(len(next(iter(batch.values()))) if batch else 0, np.int64)
    arrays = {}
    for name, enc in encodings.items():
        spec, col = fields[name], batch[name]
        arrays[name] = to_arrow(spec, enc, col, f"{where}, field {name!r}")
        sizes += record_sizes(spec, enc, col)
    return arrays, sizes


def arrow_table(schema: pa.Schema, parts: Iterable[Mapping[str, pa.Array]]) -> pa.Table:
    """A table of ``schema`` whose columns are the parts' arrays (chunks, in order)."""
    chunks: list[list[pa.Array]] = [[] for _ in schema]
    for part in parts:
        for column, f in zip(chunks, schema, strict=True):
            column.append(part[f.name])
    return pa.Table.from_arrays(
        [pa.chunked_array(c, f.type) for c, f in zip(chunks, schema, strict=True)], schema=schema
    )


# ------------------------------------------------------------------ Arrow -> dstore


def _no_nulls(arr: pa.Array, where: str, first: int, what: str = "") -> None:
    if arr.null_count:
        at = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        rec = f"record {first + at}" if not what else f"record {first}+ ({what} {at})"
        raise CodecIOError(f"{where}, {rec}: null value (dstore fields have no missing values)")


def _values_of(arr: pa.Array) -> pa.Array:
    """The values under a list array without nulls, one level down: a fixed-size list's
    sliced from its child directly (``flatten()`` imports ``pyarrow.compute``, 60 ms in
    every DataLoader worker that reads a label), other lists flattened."""
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        return arr.values.slice(arr.offset * size, len(arr) * size)
    return arr.flatten()


def _numbers(spec: FieldSpec, arr: pa.Array, where: str, first: int) -> Column:
    """The numbers under ``arr``'s list levels and each level's lengths."""
    dims = real_dims(spec)[1]
    levels = []
    for depth in range(isinstance(spec.kind, Ragged) + len(dims) + image_axes(spec)):
        _no_nulls(arr, where, first, "" if depth == 0 else f"value at axis {depth}")
        if not is_list(arr.type):
            raise CodecIOError(f"{where}: {arr.type} has fewer axes than the field's {dims}")
        levels.append(list_lengths(arr))
        arr = _values_of(arr)
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


def _holds(encoding: str, t: pa.DataType) -> bool:
    """Whether a column of Arrow type ``t`` is what ``encoding`` reads."""
    if encoding == "image":
        names = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
        return pa.types.is_struct(t) and _texty(names.get("bytes", pa.null())) is Bytes
    if encoding in ("string", "binary"):
        return _texty(t) is not None
    if encoding == "strings":
        return is_list(t) and _texty(t.value_type) is not None
    while is_list(t):
        t = t.value_type
    return _scalar(t) is not None


def from_arrow(spec: FieldSpec, encoding: str, arr: Any, where: str, first: int) -> Column:
    """The column of field ``spec`` from ``arr`` (records ``first...``); ``image``: the
    encoded bytes of each Image (an Image with only a path is refused). A column of
    another type than ``encoding`` reads (a manifest calling an int column an image)
    is one line naming ``where``."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not _holds(encoding, arr.type):
        raise CodecIOError(f"{where}: the column is {arr.type}, not what {encoding!r} reads")
    if encoding in ("string", "binary"):
        return _bytes(arr, where, first)
    _no_nulls(arr, where, first)
    if encoding == "strings":
        offsets = np.concatenate([[0], np.cumsum(list_lengths(arr))]).astype(np.int64)
        return VarColumn(_bytes(arr.flatten(), where, first), offsets)
    if encoding != "image":
        return _numbers(spec, arr, where, first)
    parts = arr.flatten()
    blobs = parts[arr.type.get_field_index("bytes")]
    if blobs.null_count:
        i = int(np.flatnonzero(blobs.is_null().to_numpy(zero_copy_only=False))[0])
        path = arr.type.get_field_index("path")  # -1: an Image of bytes alone
        has_path = path >= 0 and parts[path][i].is_valid
        why = (
            "an Image with a path and no bytes (dstore never reads files a dataset points to)"
            if has_path
            else "an Image with neither bytes nor a path"
        )
        raise CodecIOError(f"{where}, record {first + i}: {why}")
    return _bytes(blobs, where, first)
