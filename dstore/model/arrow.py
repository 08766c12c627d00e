"""Kinds of Arrow columns dstore did not write (Parquet of ``datasets``, pandas, Spark;
anything that speaks Arrow), helped by the ``huggingface`` features metadata
``datasets`` writes. The mapping is in docs/formats/parquet.md; a column of no kind is
refused by name, or dropped and noted. Imported only by what reads Arrow (pyarrow)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import SchemaError
from .infer import kind_of_axes
from .kinds import Bytes, Image, Kind, String, StringList, Tensor
from .schema import FieldSpec

__all__ = ["arrow_fields", "is_list", "list_axes", "list_lengths", "numbers"]

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


def _kind(
    t: pa.DataType, feature: Any, axes: Callable[[int], list[int | None]], image: Callable[[], str]
) -> Mapped:
    hf_type = feature.get("_type") if isinstance(feature, dict) else None
    if pa.types.is_struct(t):
        if {t.field(i).name for i in range(t.num_fields)} != {"bytes", "path"} or hf_type not in (
            None,
            "Image",
        ):
            raise _Unmapped(f"a struct ({hf_type or t})")
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
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        features = json.loads(raw)["info"]["features"] if raw else {}
    except (ValueError, KeyError, TypeError):
        features = {}
    features = features if isinstance(features, dict) else {}
    fields: dict[str, FieldSpec] = {}
    mapped: dict[str, Mapped] = {}
    notes: list[str] = []
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
