"""Batch columns: a fixed-shape field is one ndarray; a variable-size one is values + offsets.

A :class:`VarColumn` holds the records of a String, Bytes, Ragged or encoded
/ variable-size Image field the way Arrow's list and binary arrays and
TensorFlow's ``RaggedTensor`` (``values`` + ``row_splits``) do: one values
array and ``n + 1`` row offsets into its first axis, so a batch of a million
strings is two arrays, not a million Python objects. Offsets always start at
0 (slicing rebases them; the values stay a view).

Raw images whose size varies also carry ``shapes``: each record's full shape,
its values being the flattened pixels.

A list of strings per record (:class:`~dstore.model.kinds.StringList`) nests:
its values are themselves a VarColumn of strings (bytes + one offset per
string) and its offsets count strings, Arrow's ``list<string>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SchemaError
from .kinds import Bytes, Image, Kind, Ragged, String, StringList, Tensor

__all__ = [
    "Column",
    "VarColumn",
    "column_len",
    "concat_columns",
    "empty_column",
    "raw_record",
    "record",
    "slice_column",
    "take_column",
    "to_column",
]

_OFFSET = np.dtype(np.int64)


@dataclass(frozen=True, eq=False)
class VarColumn:
    """Records of varying size: ``values[offsets[i]:offsets[i+1]]`` is record ``i``."""

    #: the values; for a list of strings per record, a VarColumn of the strings
    values: np.ndarray | VarColumn
    offsets: np.ndarray
    #: per-record full shapes (raw images of varying size), else None
    shapes: np.ndarray | None = None

    def __post_init__(self) -> None:
        offsets = np.asarray(self.offsets)
        if offsets.ndim != 1 or len(offsets) == 0 or offsets.dtype.kind not in "iu":
            raise SchemaError(
                f"offsets must be a 1-d integer array of n + 1 entries. Got {offsets.dtype} {offsets.shape}."
            )
        offsets = offsets.astype(_OFFSET, copy=False)
        if offsets[0] != 0:
            offsets = offsets - offsets[0]
        object.__setattr__(self, "offsets", offsets)
        if not isinstance(self.values, VarColumn) and self.values.ndim == 0:
            raise SchemaError("values must have a first axis")

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Values per record (first-axis entries)."""
        return np.diff(self.offsets)

    @property
    def flat_values(self) -> np.ndarray:
        """The values as one array: every column but a list of strings per record."""
        if isinstance(self.values, VarColumn):
            raise TypeError("a list of strings per record has no flat values; use .strings")
        return self.values

    @property
    def strings(self) -> VarColumn:
        """A list of strings per record: the column of all records' strings."""
        if not isinstance(self.values, VarColumn):
            raise TypeError("not a list of strings per record: use .flat_values")
        return self.values

    @property
    def nested(self) -> bool:
        """True for a list of strings per record (the values are a VarColumn of strings)."""
        return isinstance(self.values, VarColumn)

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the innermost values (uint8 for strings and bytes)."""
        return self.values.dtype

    @property
    def nbytes(self) -> int:
        return int(
            self.values.nbytes
            + self.offsets.nbytes
            + (0 if self.shapes is None else self.shapes.nbytes)
        )

    def check(self, where: str) -> None:
        """Offsets that could describe these values: start 0, never decrease, end at len(values)."""
        if len(self.offsets) > 1 and np.any(np.diff(self.offsets) < 0):
            bad = int(np.argmax(np.diff(self.offsets) < 0))
            raise SchemaError(f"{where}: offsets decrease at record {bad}")
        if int(self.offsets[-1]) != len(self.values):
            # the first record that ends past the values, else the last (values left over)
            past = np.flatnonzero(self.offsets[1:] > len(self.values))
            rec = int(past[0]) if len(past) else len(self) - 1
            raise SchemaError(
                f"{where}, record {rec}: offsets end at {int(self.offsets[-1])} but there are "
                f"{len(self.values)} values (the offsets do not match the values)"
            )
        if self.shapes is not None:
            if self.shapes.ndim != 2 or len(self.shapes) != len(self):
                raise SchemaError(
                    f"{where}: shapes must be (records, ndim); got {self.shapes.shape}"
                )
            sizes = np.prod(self.shapes, axis=1, dtype=np.int64)
            if not np.array_equal(sizes, self.lengths):
                bad = int(np.argmax(sizes != self.lengths))
                raise SchemaError(
                    f"{where}: record {bad} has shape {tuple(self.shapes[bad])} but "
                    f"{int(self.lengths[bad])} values"
                )
        if isinstance(self.values, VarColumn):
            try:
                self.values.check(where)
            except SchemaError as e:
                raise SchemaError(f"{e} (of the strings of all records)") from None

    def row(self, i: int) -> np.ndarray:
        """Record ``i`` as an array (a view of the values)."""
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        out = _cut(self.values, lo, hi)
        if isinstance(out, VarColumn):
            raise TypeError("a list of strings per record has no array rows; use record()")
        if self.shapes is not None:
            out = out.reshape(tuple(int(n) for n in self.shapes[i]))
        return out

    def slice(self, start: int, stop: int) -> VarColumn:
        """Records ``start:stop`` (values stay a view)."""
        lo, hi = int(self.offsets[start]), int(self.offsets[stop])
        shapes = None if self.shapes is None else self.shapes[start:stop]
        return VarColumn(_cut(self.values, lo, hi), self.offsets[start : stop + 1] - lo, shapes)

    def take(self, indices: Sequence[int] | np.ndarray) -> VarColumn:
        """Records at ``indices``, in that order (a copy)."""
        idx = np.asarray(indices, dtype=np.int64)
        lengths = self.lengths[idx] if len(idx) else np.zeros(0, np.int64)
        offsets = np.zeros(len(idx) + 1, _OFFSET)
        np.cumsum(lengths, out=offsets[1:])
        if len(idx):
            # one gather over the flat value positions of all picked records
            starts = np.repeat(self.offsets[idx], lengths)
            within = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
            values = _gather(self.values, starts + within)
        else:
            values = _cut(self.values, 0, 0)
        shapes = None if self.shapes is None else self.shapes[idx]
        return VarColumn(values, offsets, shapes)

    @classmethod
    def concat(cls, parts: Sequence[VarColumn]) -> VarColumn:
        if not parts:
            raise ValueError("concat of no columns")
        if len(parts) == 1:
            return parts[0]
        values: np.ndarray | VarColumn
        if isinstance(parts[0].values, VarColumn):
            values = VarColumn.concat([p.values for p in parts if isinstance(p.values, VarColumn)])
        else:
            values = np.concatenate([p.values for p in parts]).astype(
                parts[0].values.dtype, copy=False
            )
        bases = np.cumsum([0] + [int(p.offsets[-1]) for p in parts[:-1]])
        offsets = np.concatenate(
            [parts[0].offsets[:1]] + [p.offsets[1:] + b for p, b in zip(parts, bases, strict=True)]
        )
        shapes = None
        if parts[0].shapes is not None:
            shapes = np.concatenate([p.shapes for p in parts if p.shapes is not None])
        return cls(values, offsets, shapes)

    @classmethod
    def from_rows(
        cls, rows: Iterable[Any], dtype: Any, inner_shape: tuple[int, ...] = ()
    ) -> VarColumn:
        """Build from per-record arrays of shape ``(n_i, *inner_shape)``."""
        arrays = [np.asarray(r, dtype=dtype) for r in rows]
        for i, a in enumerate(arrays):
            if a.ndim == 0 or a.shape[1:] != inner_shape:
                raise SchemaError(f"record {i} has shape {a.shape}, expected (n, *{inner_shape})")
        offsets = np.zeros(len(arrays) + 1, _OFFSET)
        np.cumsum([len(a) for a in arrays], out=offsets[1:])
        values = np.concatenate(arrays) if arrays else np.zeros((0, *inner_shape), dtype)
        return cls(values.astype(dtype, copy=False), offsets)

    @classmethod
    def from_shaped(cls, rows: Sequence[np.ndarray], dtype: Any) -> VarColumn:
        """Build from per-record arrays of any shape (raw images of varying size): their
        values flattened, each record's shape kept in ``shapes``."""
        flat = cls.from_rows([a.reshape(-1) for a in rows], dtype)
        shapes = np.array([a.shape for a in rows], np.int64).reshape(len(rows), -1)
        return cls(flat.values, flat.offsets, shapes)

    @classmethod
    def from_bytes(cls, items: Iterable[bytes]) -> VarColumn:
        blobs = list(items)
        offsets = np.zeros(len(blobs) + 1, _OFFSET)
        np.cumsum([len(b) for b in blobs], out=offsets[1:])
        if len(blobs) == 1:  # a batch of one large record: its bytes (or view) as they are
            return cls(np.frombuffer(blobs[0], np.uint8), offsets)
        return cls(np.frombuffer(b"".join(blobs), np.uint8), offsets)

    @classmethod
    def from_strings(cls, items: Iterable[str]) -> VarColumn:
        return cls.from_bytes(s.encode("utf-8") for s in items)

    @classmethod
    def from_lists(
        cls, records: Iterable[Sequence[str | bytes | bytearray | memoryview]]
    ) -> VarColumn:
        """A list-of-strings column from per-record lists of ``str`` (or of ``bytes``)."""
        lists = [list(r) for r in records]
        offsets = np.zeros(len(lists) + 1, _OFFSET)
        np.cumsum([len(r) for r in lists], out=offsets[1:])
        flat = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for r in lists for s in r]
        return cls(cls.from_bytes(flat), offsets)

    def to_lists(self, text: bool, where: str = "field") -> list[list[Any]]:
        """Each record's list of strings (``text``) or of bytes: a nested column only."""
        if not isinstance(self.values, VarColumn):
            raise TypeError("to_lists needs a list-of-strings column")
        items: list[Any] = self.values.to_str_list(where) if text else self.values.to_bytes_list()
        o = self.offsets.tolist()
        return [items[o[i] : o[i + 1]] for i in range(len(self))]

    def to_bytes_list(self) -> list[bytes]:
        if isinstance(self.values, VarColumn):
            raise TypeError("a list of strings per record: use to_lists")
        buf = np.ascontiguousarray(self.values).tobytes()
        o = self.offsets.tolist()
        return [buf[o[i] : o[i + 1]] for i in range(len(self))]

    def to_str_list(self, where: str = "string field") -> list[str]:
        out = []
        for i, b in enumerate(self.to_bytes_list()):
            try:
                out.append(b.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise SchemaError(f"{where}, record {i}: invalid UTF-8 at byte {e.start}") from None
        return out

    def check_utf8(self, where: str) -> None:
        """Every record is valid UTF-8 on its own (a record boundary inside a
        multi-byte character is as invalid as a bad byte)."""
        if isinstance(self.values, VarColumn):
            bad = self.values.first_invalid_utf8()
            if bad is not None:
                # found by string; the user needs the record that holds it
                string, why = bad
                rec = int(np.searchsorted(self.offsets, string, side="right")) - 1
                nth = string - int(self.offsets[rec])
                raise SchemaError(f"{where}, record {rec}: invalid UTF-8{why} in string {nth}")
            return
        bad = self.first_invalid_utf8()
        if bad is not None:
            raise SchemaError(f"{where}, record {bad[0]}: invalid UTF-8{bad[1]}")

    def first_invalid_utf8(self) -> tuple[int, str] | None:
        """The first record that is not valid UTF-8 on its own, and why (or None)."""
        values = self.flat_values
        buf = np.ascontiguousarray(values).tobytes()
        try:
            buf.decode("utf-8")
        except UnicodeDecodeError as e:
            return int(np.searchsorted(self.offsets, e.start, side="right")) - 1, ""
        starts = self.offsets[:-1][self.lengths > 0]
        if len(starts):
            # a record may not start on a continuation byte (10xxxxxx)
            cont = (values[starts] & 0xC0) == 0x80
            if cont.any():
                rec = int(np.flatnonzero(self.lengths > 0)[int(np.argmax(cont))])
                # the character began in an earlier record, which ends inside it
                rec = int(np.searchsorted(self.offsets, self.offsets[rec] - 1, side="right")) - 1
                return rec, " (a character split across records)"
        return None


Column = np.ndarray | VarColumn


def _cut(values: np.ndarray | VarColumn, lo: int, hi: int) -> Any:
    return values.slice(lo, hi) if isinstance(values, VarColumn) else values[lo:hi]


def _gather(values: np.ndarray | VarColumn, idx: np.ndarray) -> Any:
    return values.take(idx) if isinstance(values, VarColumn) else values[idx]


def _is_dense(kind: Kind) -> bool:
    return isinstance(kind, Tensor) or (isinstance(kind, Image) and kind.is_dense)


def column_len(col: Column) -> int:
    return len(col)


def slice_column(col: Column, start: int, stop: int) -> Column:
    return col.slice(start, stop) if isinstance(col, VarColumn) else col[start:stop]


def take_column(col: Column, indices: np.ndarray) -> Column:
    """Records ``indices`` of ``col``, in that order."""
    return _gather(col, np.asarray(indices, np.int64))


def concat_columns(kind: Kind, parts: Sequence[Column]) -> Column:
    """One column from batches, keeping the kind's dtype (numpy would make it native-endian)."""
    if not parts:
        return empty_column(kind)
    if _is_dense(kind):
        dense = [np.asarray(p) for p in parts]
        out = dense[0] if len(dense) == 1 else np.concatenate(dense)
        return out.astype(kind.value_dtype, copy=False)
    return VarColumn.concat([p for p in parts if isinstance(p, VarColumn)])


def empty_column(kind: Kind) -> Column:
    if isinstance(kind, Tensor):
        return np.empty((0, *kind.shape), kind.dtype)
    if isinstance(kind, Image) and kind.is_dense:
        return np.empty((0, *(kind.shape or ())), kind.dtype)
    if isinstance(kind, StringList):
        return VarColumn.from_lists([])
    inner: tuple[int, ...] = kind.inner_shape if isinstance(kind, Ragged) else ()
    shapes = None
    if isinstance(kind, Image) and kind.encoding == "raw":
        shapes = np.zeros((0, 2 if kind.channels == 0 else 3), np.int64)
    return VarColumn(np.empty((0, *inner), kind.value_dtype), np.zeros(1, _OFFSET), shapes)


def record(kind: Kind, col: Column, i: int) -> Any:
    """Record ``i`` as a user sees it: an ndarray, or ``str`` / ``bytes``."""
    if not isinstance(col, VarColumn):
        return col[i]
    if isinstance(kind, StringList):
        return col.slice(i, i + 1).to_lists(kind.text)[0]
    if isinstance(kind, String):
        lo, hi = int(col.offsets[i]), int(col.offsets[i + 1])
        return col.flat_values[lo:hi].tobytes().decode("utf-8")
    if isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw"):
        lo, hi = int(col.offsets[i]), int(col.offsets[i + 1])
        return col.flat_values[lo:hi].tobytes()
    return col.row(i)


def raw_record(kind: Kind, col: Column, i: int) -> Any:
    """Record ``i`` as a writer encodes it: byte strings as ``bytes`` (no UTF-8 round
    trip), a list of strings as a list of ``bytes``, anything else an ndarray."""
    if not isinstance(col, VarColumn):
        return col[i]
    lo, hi = int(col.offsets[i]), int(col.offsets[i + 1])
    if isinstance(col.values, VarColumn):  # a list of strings: its byte strings
        return col.values.slice(lo, hi).to_bytes_list()
    if isinstance(kind, (String, Bytes)) or (isinstance(kind, Image) and kind.encoding != "raw"):
        return col.values[lo:hi].tobytes()
    return col.row(i)


def to_column(kind: Kind, data: Any, where: str = "field") -> Column:
    """A column of ``kind`` from what a user hands to ``dstore.save``: an ndarray,
    a VarColumn, or a list of per-record values (str, bytes, arrays)."""
    if isinstance(data, VarColumn):
        return _checked_var_column(kind, data, where)
    if _is_dense(kind):
        arr = np.asarray(data)
        return arr
    items = list(data)
    if isinstance(kind, StringList):
        return _string_list_column(kind, items, where)
    if isinstance(kind, String):
        bad = next((i for i, s in enumerate(items) if not isinstance(s, str)), None)
        if bad is not None:
            raise SchemaError(
                f"{where}, record {bad}: {type(items[bad]).__name__} in a string field"
            )
        return VarColumn.from_strings(items)
    if isinstance(kind, Bytes) or (isinstance(kind, Image) and kind.encoding != "raw"):
        return _bytes_column(items, where)
    if isinstance(kind, Ragged):
        try:
            return VarColumn.from_rows(items, kind.dtype, kind.inner_shape)
        except SchemaError as e:  # names the record; the field is known here
            raise SchemaError(f"{where}, {e}: a ragged field's inner shape cannot change") from None
    if isinstance(kind, Image):  # raw pixels of varying size
        return VarColumn.from_shaped([np.asarray(a, dtype=kind.dtype) for a in items], kind.dtype)
    raise SchemaError(f"{where}: cannot build a column of kind {kind.describe()}")


def _checked_var_column(kind: Kind, data: VarColumn, where: str) -> VarColumn:
    """A VarColumn handed in as it is: its offsets, nesting and (for text) UTF-8 checked."""
    data.check(where)
    if isinstance(data.values, VarColumn) != isinstance(kind, StringList):
        raise SchemaError(
            f"{where}: a {kind.describe()} field needs "
            + ("nested values + offsets" if isinstance(kind, StringList) else "flat values")
        )
    if isinstance(kind, String) or (isinstance(kind, StringList) and kind.text):
        data.check_utf8(where)
    return data


def _string_list_column(kind: StringList, items: list[Any], where: str) -> VarColumn:
    want = str if kind.text else (bytes, bytearray, memoryview)
    for i, r in enumerate(items):
        if isinstance(r, (str, bytes)) or not all(isinstance(s, want) for s in r):
            raise SchemaError(
                f"{where}, record {i}: a {kind.describe()} record must be a list of "
                f"{'str' if kind.text else 'bytes'}"
            )
    return VarColumn.from_lists(items)


def _bytes_column(items: list[Any], where: str) -> VarColumn:
    bad = next(
        (i for i, b in enumerate(items) if not isinstance(b, (bytes, bytearray, memoryview))),
        None,
    )
    if bad is not None:
        raise SchemaError(f"{where}, record {bad}: {type(items[bad]).__name__} in a bytes field")
    return VarColumn.from_bytes(bytes(b) for b in items)
