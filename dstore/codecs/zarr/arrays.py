"""How dstore's field kinds sit in zarr arrays: blosc and checksummed zstd chunks,
varying-size values (strings, bytes, ragged records) as values plus offsets
(:class:`_VarArrays`, read back by :class:`_RaggedGroup`), attributes as JSON."""

from __future__ import annotations

from typing import Any

import numpy as np
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec
from zarr.core.dtype import VariableLengthUTF8

from ...errors import CodecIOError
from ...model import (
    Image,
    Kind,
    Ragged,
    String,
    StringList,
    VarColumn,
    names,
)
from ...model.attrs import for_zarr, is_missing
from ...model.schema import (
    FieldSpec,
)
from .options import _ATTR

_BLOSC_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}

#: Every array dstore writes ends its codec chain in zarr v3's ``crc32c`` codec: each
#: chunk file carries the CRC32C of its bytes, which zarr checks on every read, so a
#: range read of a damaged chunk fails instead of decoding garbage (blosc returns
#: its declared size even from a truncated buffer). Stores written before it read as ever.
_CRC = Crc32cCodec()
#: zarr's default compressor of variable-length and offset arrays, then the CRC
_CHECKED_ZSTD = (ZstdCodec(level=0, checksum=False), _CRC)


def _with_crc(data: bytes) -> bytes:
    """``data`` followed by its CRC32C (little-endian), as zarr's ``crc32c`` codec writes it."""
    import google_crc32c  # zarr's own dependency for this codec

    return data + int(google_crc32c.value(data)).to_bytes(4, "little")


def _native(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype


#: a field whose records vary and is not text: a group of these arrays (TensorFlow's RaggedTensor names)
_VALUES, _ROW_SPLITS, _SHAPES = "values", "row_splits", "shapes"
#: a list of byte strings per record: strings + 1 offsets of each string into the uint8 values
_VALUE_SPLITS = "value_splits"
_KIND_ATTR = "dstore_kind"
#: records per chunk of a variable-length string/bytes array
_VAR_CHUNK = 4096


class _VarArrays:
    """Where a field whose records vary is written.

    Strings are one array of zarr's variable-length ``string`` data type:
    ``zarr.open`` users get one ``str`` per record. Everything else -- ragged
    values, bytes, encoded images, raw images of varying size -- is a group
    holding ``values`` (every record's values, appended), ``row_splits``
    (records + 1 int64 offsets into them) and for raw images ``shapes``; the
    group's ``dstore_kind`` attribute says what they are. (zarr-python's
    variable-length ``bytes`` type has no zarr v3 specification yet and warns
    that other zarr libraries may not read it; plain uint8 values can.)

    A list of strings per record is a group too: ``values`` is a ``string``
    array of every record's strings in order and ``row_splits`` counts strings
    (record ``i``'s list is ``values[row_splits[i]:row_splits[i+1]]``). For a
    list of byte strings ``values`` is uint8 and ``value_splits`` (strings + 1
    offsets into it) cuts the strings."""

    def __init__(
        self, text: Any = None, values: Any = None, splits: Any = None, shapes: Any = None
    ) -> None:
        self.text, self.values, self.splits, self.shapes = text, values, splits, shapes
        self.value_splits: Any = None
        self.pos = 0
        self.kind: Kind | None = None

    @classmethod
    def create(
        cls, group: Any, count: int, spec: FieldSpec, compressor: Any, name: str | None = None
    ) -> _VarArrays:
        name = names.escape(spec.name) if name is None else name
        chunks = (max(1, min(count, _VAR_CHUNK)),)
        kind = spec.kind
        if isinstance(kind, String):
            out = cls(
                text=group.create_array(
                    name,
                    shape=(count,),
                    dtype=VariableLengthUTF8(),
                    chunks=chunks,
                    compressors=_CHECKED_ZSTD,
                )
            )
        else:
            sub = group.create_group(name, attributes={_KIND_ATTR: kind.to_json()})
            inner = spec.shape if isinstance(kind, Ragged) else ()
            rows = max(
                1, (1 << 20) // max(1, int(np.prod(inner, dtype=np.int64)) * spec.dtype.itemsize)
            )
            if isinstance(kind, StringList) and kind.text:
                values = sub.create_array(
                    _VALUES,
                    shape=(0,),
                    dtype=VariableLengthUTF8(),
                    chunks=(_VAR_CHUNK,),
                    compressors=_CHECKED_ZSTD,
                )
            else:
                values = sub.create_array(
                    _VALUES,
                    shape=(0, *inner),
                    dtype=_native(spec.dtype),
                    chunks=(rows, *(max(1, d) for d in inner)),
                    compressors=compressor,
                    fill_value=0,
                )
            splits = sub.create_array(
                _ROW_SPLITS,
                shape=(count + 1,),
                dtype="<i8",
                chunks=(max(1, min(count + 1, 1 << 17)),),
                compressors=_CHECKED_ZSTD,
            )
            splits[0:1] = np.zeros(1, np.int64)
            shapes = None
            if isinstance(kind, Image) and kind.encoding == "raw":
                ndim = 2 if kind.channels == 0 else 3
                shapes = sub.create_array(
                    _SHAPES,
                    shape=(count, ndim),
                    dtype="<i8",
                    chunks=(max(1, min(count, 1 << 16)), ndim),
                    compressors=_CHECKED_ZSTD,
                )
            out = cls(values=values, splits=splits, shapes=shapes)
            if isinstance(kind, StringList) and not kind.text:
                out.value_splits = sub.create_array(
                    _VALUE_SPLITS,
                    shape=(1,),
                    dtype="<i8",
                    chunks=(1 << 17,),
                    fill_value=0,
                    compressors=_CHECKED_ZSTD,
                )
        out.kind = kind
        return out

    @classmethod
    def reopen(cls, node: Any, kind: Kind, count: int, more: int) -> _VarArrays:
        """The arrays of a field of ``count`` committed records, cut back to them (what a
        killed append left after them goes) and grown for ``more`` records."""
        if isinstance(node, zarr.Array):  # strings: one array of them
            node.resize((count + more,))
            out = cls(text=node)
        else:
            values, splits = node[_VALUES], node[_ROW_SPLITS]
            shapes, cuts = node.get(_SHAPES), node.get(_VALUE_SPLITS)
            end = int(splits[count]) if count else 0
            if cuts is not None:
                cuts.resize((end + 1,))
                values.resize((int(cuts[end]) if end else 0,))
            else:
                values.resize((end, *values.shape[1:]))
            splits.resize((count + more + 1,))
            if shapes is not None:
                shapes.resize((count + more, shapes.shape[1]))
            out = cls(values=values, splits=splits, shapes=shapes)
            out.value_splits = cuts
        out.kind, out.pos = kind, count
        return out

    def write(self, col: VarColumn) -> None:
        n = len(col)
        if n == 0:
            return
        if self.text is not None:
            self.text[self.pos : self.pos + n] = np.array(col.to_str_list(), dtype=object)
        elif isinstance(col.values, VarColumn):
            strings = col.values
            base = (
                self.values.shape[0]
                if self.value_splits is None
                else self.value_splits.shape[0] - 1
            )
            if self.value_splits is None:
                if len(strings):
                    self.values.append(np.array(strings.to_str_list(), dtype=object))
            elif len(strings):
                self.value_splits.append(strings.offsets[1:] + self.values.shape[0])
                self.values.append(strings.values)
            self.splits[self.pos + 1 : self.pos + n + 1] = col.offsets[1:] + base
        else:
            base = self.values.shape[0]
            if len(col.values):
                self.values.append(col.values.astype(_native(col.values.dtype), copy=False))
            self.splits[self.pos + 1 : self.pos + n + 1] = col.offsets[1:] + base
            if self.shapes is not None and col.shapes is not None:
                self.shapes[self.pos : self.pos + n] = col.shapes
        self.pos += n


def _zdtype(arr: Any) -> Any:
    """zarr's data type object of an array (v3 metadata: ``data_type``; v2: ``dtype``)."""
    meta = arr.metadata
    return getattr(meta, "data_type", None) or getattr(meta, "dtype", None)


def _fixed_text(arr: Any) -> str:
    """``"U"`` or ``"S"`` for a fixed-width text or bytes array (numpy ``<U``/``S``), else "".

    Read as strings and bytes, as npz and HDF5 read them: numpy's rule drops the
    trailing NULs that pad each value to the width."""
    kind = np.dtype(arr.dtype).kind
    return kind if kind in "US" else ""


def _is_ragged_layout(group: Any) -> bool:
    """Is a group without dstore's kind attribute the ragged layout made by hand: arrays
    ``values`` and ``row_splits`` (1-d integers) and perhaps ``shapes``, nothing else?
    Any other group with such names is walked as a group (its arrays are fields): none
    is dropped and none is reinterpreted."""
    members = dict(group.members())
    if not {_VALUES, _ROW_SPLITS} <= members.keys() <= {_VALUES, _ROW_SPLITS, _SHAPES}:
        return False
    if not all(isinstance(m, zarr.Array) for m in members.values()):
        return False
    splits = members[_ROW_SPLITS]
    return splits.ndim == 1 and splits.shape[0] >= 1 and np.dtype(splits.dtype).kind in "iu"


class _RaggedGroup:
    """A ragged field's group read back: sliceable like an array of records."""

    def __init__(self, group: Any, where: str, growing: bool = False) -> None:
        self.group = group
        self.values = group[_VALUES]
        self.splits = group[_ROW_SPLITS]
        self.shapes = group.get(_SHAPES)
        self.name = self.path = group.path
        if (
            self.splits.ndim != 1
            or self.splits.shape[0] < 1
            or np.dtype(self.splits.dtype).kind not in "iu"
        ):
            raise CodecIOError(
                f"{where}: {_ROW_SPLITS!r} must be a 1-d integer array of records + 1 offsets"
            )
        self.shape = (self.splits.shape[0] - 1,)
        self.dtype = self.values.dtype
        self.ndim = 1
        self.attrs = group.attrs
        # the two ends, read now (two elements), so that info refuses what convert would
        count = (
            group[_VALUE_SPLITS].shape[0] - 1 if _VALUE_SPLITS in group else self.values.shape[0]
        )
        first, last = int(self.splits[0]), int(self.splits[-1])
        # an append in flight: records after the committed ones may be half written
        if not growing and (first != 0 or last != count):
            raise CodecIOError(
                f"{where}: row splits run from {first} to {last}, not from 0 to {count} "
                "(the number of values)"
            )

    def read(self, start: int, stop: int, inner: tuple[int, ...], where: str) -> VarColumn:
        offsets = np.asarray(self.splits[start : stop + 1], dtype=np.int64)
        lo, hi = int(offsets[0]), int(offsets[-1])
        # a list of bytes counts its strings by value_splits: its values are the bytes
        count = (
            self.group[_VALUE_SPLITS].shape[0] - 1
            if _VALUE_SPLITS in self.group
            else self.values.shape[0]
        )
        # the first record starts at 0 and the last ends at the last value: values
        # before or after them would be dropped unread (found by a hostile-input pass)
        ends = (start == 0 and lo != 0) or (stop == self.shape[0] and hi != count)
        if lo < 0 or hi > count or ends or (np.diff(offsets) < 0).any():
            bad = (
                int(np.argmax(np.diff(offsets) < 0)) + start
                if (np.diff(offsets) < 0).any()
                else (start if lo != 0 or stop != self.shape[0] else stop - 1)
            )
            raise CodecIOError(
                f"{where}, record {bad}: row splits do not describe the {count} values"
            )
        if _VALUE_SPLITS in self.group or isinstance(_zdtype(self.values), VariableLengthUTF8):
            return VarColumn(self._strings(lo, hi, where), offsets - lo)
        values = np.asarray(self.values[lo:hi])
        shapes = (
            None if self.shapes is None else np.asarray(self.shapes[start:stop], dtype=np.int64)
        )
        col = VarColumn(values, offsets - lo, shapes)
        col.check(where)
        return col

    def _strings(self, lo: int, hi: int, where: str) -> VarColumn:
        """Strings ``lo:hi`` of a list-of-strings group, as a column of strings."""
        if _VALUE_SPLITS not in self.group:
            return VarColumn.from_strings(str(x) for x in np.asarray(self.values[lo:hi]).tolist())
        cuts = np.asarray(self.group[_VALUE_SPLITS][lo : hi + 1], dtype=np.int64)
        if len(cuts) != hi - lo + 1 or cuts[-1] > self.values.shape[0] or (np.diff(cuts) < 0).any():
            raise CodecIOError(f"{where}: {_VALUE_SPLITS!r} do not describe the values")
        strings = VarColumn(np.asarray(self.values[int(cuts[0]) : int(cuts[-1])]), cuts)
        strings.check(where)
        return strings


def _json_attrs(encoded: dict[str, Any]) -> dict[str, Any]:
    """User attributes as zarr holds them (JSON); the others are named by attribute_notes."""
    out = {}
    for name, enc in encoded.items():
        value, _ = for_zarr(enc)
        if not is_missing(value) and name != _ATTR:
            out[name] = value
    return out
