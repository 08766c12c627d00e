"""Fields of Parquet files dstore did not write (``datasets``, pandas, pyarrow, Spark).

Arrow types map to kinds; the ``huggingface`` metadata ``datasets`` writes
adds what types cannot say (an ``Image`` struct, ``ClassLabel`` names):

=================================  =========================================
Arrow type                         kind
=================================  =========================================
bool, integers, floats             Tensor scalar
fixed-size lists (any depth), or   Tensor of that shape
lists whose records all have one
length
lists whose first axis varies      Ragged (inner axes of one length)
string / binary (large, dict too)  String / Bytes
list<string|binary>                StringList
struct<bytes, path> (Hub Image)    Image, encoded (PNG/JPEG... by its bytes)
=================================  =========================================

Anything else (structs of other shapes, Audio, maps, timestamps, decimals,
lists that vary below their first axis) is refused by column name, or
dropped with ``-o drop_unmapped=true`` (named in the reader's notes). Lengths
of variable lists are read from the files once when opened: only the list
offsets decide, but pyarrow reads the column to get them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import CodecIOError, SchemaError
from ...model import Bytes, Image, Ragged, String, StringList, Tensor
from ...model.schema import FieldSpec
from .._pixels import image_format
from .features import Storage

__all__ = ["hf_features", "infer_fields", "open_parquet"]


class Unmapped(Exception):
    """A column dstore has no kind for (the message says why)."""


def open_parquet(path: str) -> pq.ParquetFile:
    """``path`` opened by pyarrow; anything unreadable is one line naming it."""
    from ... import fs

    try:
        return pq.ParquetFile(fs.open_binary(path) if fs.is_url(path) else path)
    except (pa.ArrowException, OSError) as e:
        # pyarrow's text can span lines (thrift errors end in one): one line here
        raise CodecIOError(
            f"{path}: not a readable Parquet file: {' '.join(str(e).split())}"
        ) from None


def hf_features(schema: pa.Schema) -> dict[str, Any]:
    """The ``datasets`` features in a file's metadata, or {} (absent or unreadable)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        features = json.loads(raw)["info"]["features"] if raw else {}
    except (ValueError, KeyError, TypeError):
        return {}
    return features if isinstance(features, dict) else {}


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _scalar(t: pa.DataType) -> np.dtype | None:
    if pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t):
        return np.dtype(t.to_pandas_dtype())
    return None


def _texty(t: pa.DataType) -> type | None:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return String
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or pa.types.is_binary_view(t)
    ):
        return Bytes
    return None


def _lengths(files: list[pq.ParquetFile], name: str, depth: int) -> list[int | None]:
    """Per list level: the one length every entry has, or None when they vary (a read
    of the column, row group by row group; an empty level counts as length 0)."""
    seen: list[set[int]] = [set() for _ in range(depth)]
    for pf in files:
        for g in range(pf.metadata.num_row_groups):
            arr = pf.read_row_group(g, columns=[name]).column(0).combine_chunks()
            for level in range(depth):
                if pa.types.is_fixed_size_list(arr.type):
                    seen[level].add(arr.type.list_size)
                elif len(arr):
                    lengths = arr.value_lengths().drop_null().to_numpy(zero_copy_only=False)
                    seen[level].update(int(n) for n in np.unique(lengths))
                arr = arr.flatten()
    return [next(iter(s)) if len(s) == 1 else (0 if not s else None) for s in seen]


def _list_field(name: str, t: pa.DataType, files: list[pq.ParquetFile]) -> tuple[Any, Storage]:
    depth = 0
    inner = t
    while _is_list(inner):
        inner = inner.value_type
        depth += 1
    if (kind := _texty(inner)) is not None:
        if depth != 1:
            raise Unmapped(f"lists of {inner} nested {depth} deep")
        return StringList(kind is String), Storage("strings")
    dtype = _scalar(inner)
    if dtype is None:
        raise Unmapped(f"lists of {inner}")
    lengths = _lengths(files, name, depth)
    if all(n is not None for n in lengths):
        return Tensor(dtype, tuple(int(n or 0) for n in lengths)), Storage("value")
    if any(n is None for n in lengths[1:]):
        raise Unmapped("lists whose length varies below their first axis")
    return Ragged(dtype, tuple(int(n or 0) for n in lengths[1:])), Storage("value")


def _image_encoding(files: list[pq.ParquetFile], name: str) -> str:
    """What the first Image's bytes are (PNG, JPEG, ...): a field has one encoding."""
    for pf in files:
        for batch in pf.iter_batches(batch_size=1, columns=[name]):
            blob = batch.column(0).field("bytes")[0].as_py() if len(batch) else None
            if blob:
                return image_format(blob) or "png"
    return "png"


def _field(
    name: str, t: pa.DataType, feature: Any, files: list[pq.ParquetFile]
) -> tuple[Any, Storage, dict[str, Any]]:
    hf_type = feature.get("_type") if isinstance(feature, dict) else None
    if pa.types.is_struct(t):
        children = {t.field(i).name for i in range(t.num_fields)}
        if children == {"bytes", "path"} and hf_type in (None, "Image"):
            return (
                Image(np.dtype(np.uint8), None, None, None, _image_encoding(files, name)),
                Storage("image"),
                {},
            )
        raise Unmapped(f"a struct ({hf_type or t})")
    if (kind := _texty(t)) is not None:
        return kind(), Storage("string" if kind is String else "binary"), {}
    if (dtype := _scalar(t)) is not None:
        names = feature.get("names") if hf_type == "ClassLabel" else None
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            user = {"class_names": {"json": names}}
            return Tensor(dtype), Storage("value", class_names=tuple(names)), {"user": user}
        return Tensor(dtype), Storage("value"), {}
    if _is_list(t):
        kind, storage = _list_field(name, t, files)
        return kind, storage, {}
    raise Unmapped(str(t))


def infer_fields(
    paths: list[str], drop: bool
) -> tuple[dict[str, FieldSpec], dict[str, Storage], list[int], list[str]]:
    """Fields, storages, rows per file and notes (dropped columns) of one split's files."""
    files = [open_parquet(p) for p in paths]
    try:
        schema = files[0].schema_arrow
        for p, pf in zip(paths[1:], files[1:], strict=True):
            if not pf.schema_arrow.remove_metadata().equals(schema.remove_metadata()):
                raise SchemaError(f"{p}: columns differ from those of {paths[0]}")
        features = hf_features(schema)
        fields: dict[str, FieldSpec] = {}
        storages: dict[str, Storage] = {}
        notes: list[str] = []
        for f in schema:
            try:
                kind, storage, attrs = _field(f.name, f.type, features.get(f.name), files)
            except Unmapped as e:
                what = f"{paths[0]}: column {f.name!r} is {e}, which dstore cannot map"
                if not drop:
                    raise SchemaError(
                        f"{what}; drop such columns with -o drop_unmapped=true"
                    ) from None
                notes.append(f"{what}: dropped")
                continue
            fields[f.name] = FieldSpec(f.name, kind, attrs=attrs)
            storages[f.name] = storage
        return fields, storages, [pf.metadata.num_rows for pf in files], notes
    finally:
        for pf in files:
            pf.close()
