"""Fields inferred from samples (records as named values, e.g. the members of a tar
sample) read from files dstore did not write, and columns from decoded records."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar

import numpy as np

from ..errors import CodecIOError, SchemaError
from .columns import Column, VarColumn, to_column
from .kinds import Bytes, Image, Kind, Ragged, String, StringList, Tensor
from .schema import Batch, FieldSpec, SplitSpec

__all__ = [
    "BatchRows",
    "SampleFields",
    "array_kind",
    "list_kind",
    "records_column",
]

T = TypeVar("T")


class SampleFields(Generic[T]):
    """The fields of a split's samples, one ``field(name)`` each, made where a field is
    first seen (fields keep that order across the split). A field some samples lack
    (or that a later sample adds) is read as a list kind (:meth:`specs`), as dstore
    reads TFRecord Examples whose features differ (:mod:`dstore.codecs.example.infer`)."""

    def __init__(self, field: Callable[[str], T]) -> None:
        self.field = field
        self.fields: dict[str, T] = {}
        self.held: dict[str, int] = {}  # how many samples hold each field
        self.samples = 0

    def sample(self, names: Iterable[str]) -> dict[str, T]:
        """The fields, one of them for each of ``names``, the members of one more sample."""
        self.samples += 1
        for n in names:
            if n not in self.fields:
                self.fields[n] = self.field(n)
            self.held[n] = self.held.get(n, 0) + 1
        return self.fields

    def specs(self, present: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
        """The fields of the split from ``present``, each field's kind where a sample
        holds it: a field some samples lack becomes its :func:`list_kind`."""
        return {
            n: f if self.held[n] == self.samples else replace(f, kind=list_kind(f.kind, n))
            for n, f in present.items()
        }


def list_kind(kind: Kind, name: str) -> Ragged | StringList:
    """The list kind of field ``name`` of ``kind`` that some records lack: an absent
    record is an empty list, a present one its values (:func:`records_column`). Numbers
    are ragged (a 0-d array one value, an array its rows), strings a list of strings,
    byte strings and encoded images a list of byte strings (an image has no empty value)."""
    try:
        if isinstance(kind, Tensor):
            return Ragged(kind.dtype, kind.shape[1:])
        if isinstance(kind, (Ragged, StringList)):
            return kind
        if isinstance(kind, String):
            return StringList(text=True)
        if isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw"):
            return StringList(text=False)
    except SchemaError as e:
        raise SchemaError(f"field {name!r}, which some samples lack: {e}") from None
    raise SchemaError(
        f"field {name!r} is {kind.describe()} and some samples lack it: it has no list form"
    )


def array_kind(seen: Iterable[tuple[np.dtype, tuple[int, ...]]], where: str) -> Tensor | Ragged:
    """The kind of a field whose records are arrays of the ``(dtype, shape)`` pairs ``seen``:
    a tensor when they are one, ragged when they differ in their first axis only."""
    pairs = {(np.dtype(d), tuple(s)) for d, s in seen}
    if len(pairs) == 1:
        ((dtype, shape),) = pairs
        return Tensor(dtype, shape)
    dtypes, inner = {d for d, _ in pairs}, {s[1:] for _, s in pairs}
    if len(dtypes) == 1 and len(inner) == 1 and all(s for _, s in pairs):
        return Ragged(dtypes.pop(), inner.pop())
    shown = sorted((d.str, s) for d, s in pairs)[:3]
    raise SchemaError(
        f"{where} records differ in dtype or in more than their first axis ({shown} ...), "
        "so they are neither one tensor nor ragged"
    )


def records_column(spec: FieldSpec, values: list[Any], where: str) -> Column:
    """A column of ``spec`` from its records decoded one by one: arrays, or the stored
    bytes of strings, byte strings and encoded images (invalid UTF-8 is a CodecIOError:
    the data as stored is bad). In a list kind (:func:`list_kind`) an absent record
    (None) is an empty list, a string or a 0-d array one value."""
    kind = spec.kind
    if spec.dense:
        return np.stack(values).astype(spec.dtype, copy=False)
    if isinstance(kind, Ragged):
        empty = np.zeros((0, *kind.inner_shape), kind.dtype)
        values = [
            empty if v is None else np.reshape(v, 1) if np.ndim(v) == 0 else v for v in values
        ]
    if isinstance(kind, (String, Bytes, StringList)) or (
        isinstance(kind, Image) and kind.encoding != "raw"
    ):
        col = (
            VarColumn.from_lists(
                [[] if v is None else v if isinstance(v, list) else [v] for v in values]
            )
            if isinstance(kind, StringList)
            else VarColumn.from_bytes(values)
        )
        if isinstance(kind, String) or (isinstance(kind, StringList) and kind.text):
            try:
                col.check_utf8(where)
            except SchemaError as e:
                raise CodecIOError(str(e)) from None
        return col
    return to_column(kind, values, where)


class BatchRows:
    """A batch filled record by record, from several decoding threads at once: a dense
    field's records are decoded straight into their row of one array (no stack of
    record arrays, no join of group batches), other fields' are collected and made a
    column (:func:`records_column`) by :meth:`batch`."""

    def __init__(self, spec: SplitSpec, names: Sequence[str], count: int) -> None:
        self.spec = spec
        self._cols: dict[str, np.ndarray | list[Any]] = {
            name: np.empty((count, *f.shape), f.dtype) if f.dense else [None] * count
            for name in names
            for f in (spec.fields[name],)
        }

    def fill(
        self, name: str, i: int, decode: Callable[[np.ndarray | None], Any], where: str
    ) -> None:
        """Record ``i`` of field ``name``: ``decode(row)`` either decodes into ``row`` (the
        record's row of a dense field; None for other fields) and returns it, or returns
        the value, which a dense row takes when it has the row's shape exactly."""
        col = self._cols[name]
        if not isinstance(col, np.ndarray):
            col[i] = decode(None)
            return
        row = col[i, ...]
        value = decode(row)
        if value is row:
            return
        arr = np.asarray(value)
        if value is None or arr.shape != row.shape:  # assigning would broadcast a wrong shape
            got = "nothing" if value is None else f"{arr.dtype} {arr.shape}"
            raise CodecIOError(f"{where}: holds {got}, field is {col.dtype} {row.shape}")
        row[...] = arr  # copied on the decoding thread while the record is in cache

    def batch(self) -> Batch:
        return {
            name: col
            if isinstance(col, np.ndarray)
            else records_column(self.spec.fields[name], col, f"{self.spec.name}: field {name!r}")
            for name, col in self._cols.items()
        }
