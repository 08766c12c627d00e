"""The dataset model: splits of fields that share a record axis.

A :class:`Schema` holds :class:`SplitSpec` objects (``train``, ``test``, ...),
each a table of :class:`FieldSpec` (name, dtype, per-record shape, original key
and attributes) with one record count. Every codec stores the schema as JSON
next to the data, so a round trip restores keys, dtypes and shapes. Data moves
as *batches*: ``dict[field name, ndarray]`` whose arrays share axis 0.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..errors import SchemaError
from .columns import Column, VarColumn, slice_column
from .kinds import (
    Image,
    Kind,
    Ragged,
    String,
    StringList,
    Tensor,
    check_numeric_dtype,
    kind_from_json,
)

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_SPLIT",
    "KNOWN_SPLITS",
    "LEGACY_CHECKSUM_ATTR",
    "MAX_EMPTY_RECORDS",
    "NOMINAL_VAR_RECORD_BYTES",
    "Batch",
    "FieldSpec",
    "Schema",
    "SerializedBatch",
    "SplitSpec",
    "batch_rows_for",
    "check_batch",
    "check_dtype",
    "check_empty_records",
    "schema_digest",
    "slice_batch",
]

#: One batch: field name -> column (an ndarray, or values + offsets where records vary).
Batch = dict[str, Column]


class SerializedBatch(dict[str, Column]):
    """A batch that also carries each record as its reader found it serialized
    (None where it is not the form the writer would produce), for a writer that
    would write those same bytes to copy instead of encode them.

    ``signature`` names what the bytes are valid for (a TFRecord reader: each
    field's feature name, encoding and dtype); a writer whose own differs, or a
    batch rebuilt by a dtype policy, a layout or a rename (a plain dict then),
    encodes the values as usual."""

    __slots__ = ("records", "signature")

    def __init__(
        self, columns: Batch, records: list[bytes | None], signature: tuple[Any, ...]
    ) -> None:
        super().__init__(columns)
        self.records = records
        self.signature = signature

    def __reduce__(self) -> Any:
        return (SerializedBatch, (dict(self), self.records, self.signature))


def slice_batch(batch: Batch, start: int, stop: int) -> Batch:
    """Records ``start:stop`` of every column (and of a :class:`SerializedBatch`'s records)."""
    columns = {k: slice_column(v, start, stop) for k, v in batch.items()}
    if isinstance(batch, SerializedBatch):
        return SerializedBatch(columns, batch.records[start:stop], batch.signature)
    return columns


#: Split name used when the source has no notion of splits.
DEFAULT_SPLIT = "data"
#: Split names recognised in label-maker style keys (``x_train``, ``y_val``).
KNOWN_SPLITS = ("train", "test", "val", "valid", "validation", "dev", "eval")
_SUFFIX_RE = re.compile(r"^(?P<field>.+)_(?P<split>" + "|".join(KNOWN_SPLITS) + r")$")

#: Default bound on the bytes one batch holds (all fields together).
DEFAULT_BATCH_BYTES = 16 * 1024 * 1024


def check_dtype(dtype: np.dtype, where: str) -> np.dtype:
    """Refuse dtypes dstore cannot carry safely (objects would need pickle)."""
    return check_numeric_dtype(dtype, where)


#: Bytes per record assumed for sizing batches of fields whose records vary
#: (strings, ragged lists, encoded images): a bound on memory, not a measurement.
NOMINAL_VAR_RECORD_BYTES = 4096


@dataclass(frozen=True)
class FieldSpec:
    """One named field of a split: its kind (what a record is), original key and attributes."""

    name: str
    kind: Kind
    key: str | None = None  # the name it had in the source (npz key, HDF5 path)
    attrs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def tensor(
        cls,
        name: str,
        dtype: Any,
        shape: Sequence[int] = (),
        key: str | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> FieldSpec:
        """A fixed-shape numeric field (the kind every field had before kinds existed)."""
        return cls(name, Tensor(np.dtype(dtype), tuple(shape)), key, dict(attrs or {}))

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the values (uint8 bytes for strings, bytes and encoded images)."""
        return self.kind.value_dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """Record shape of a dense field; the inner shape of a ragged one; else ()."""
        if isinstance(self.kind, Tensor):
            return self.kind.shape
        if isinstance(self.kind, Ragged):
            return self.kind.inner_shape
        if isinstance(self.kind, Image) and self.kind.is_dense:
            return self.kind.shape or ()
        return ()

    @property
    def dense(self) -> bool:
        """True when a batch column of this field is one ndarray (Tensor, raw fixed-size Image)."""
        return isinstance(self.kind, Tensor) or (
            isinstance(self.kind, Image) and self.kind.is_dense
        )

    @property
    def record_bytes(self) -> int:
        """Bytes of one record in memory; a nominal size where records vary."""
        n = self.kind.record_bytes()
        return NOMINAL_VAR_RECORD_BYTES if n is None else n

    def to_json(self) -> dict[str, Any]:
        if isinstance(self.kind, Tensor):  # the pre-kinds form: files stay byte-identical
            out: dict[str, Any] = {"dtype": self.dtype.str, "shape": list(self.shape)}
        else:
            out = self.kind.to_json()
        if self.key is not None:
            out["key"] = self.key
        if self.attrs:
            out["attrs"] = dict(self.attrs)
        return out

    @classmethod
    def from_json(cls, name: str, data: Mapping[str, Any]) -> FieldSpec:
        if not isinstance(data, Mapping):
            raise SchemaError(f"field {name!r}: bad schema entry {data!r}")
        kind = kind_from_json(data, f"field {name!r}")
        key = data.get("key")
        attrs = data.get("attrs", {})
        if (key is not None and not isinstance(key, str)) or not isinstance(attrs, Mapping):
            raise SchemaError(f"field {name!r}: bad schema entry {data!r}")
        return cls(name, kind, key, dict(attrs))


@dataclass
class SplitSpec:
    """A table of fields sharing one record count."""

    name: str
    count: int
    fields: dict[str, FieldSpec]

    @property
    def record_bytes(self) -> int:
        """Bytes per record for sizing batches (a nominal size for fields whose records vary)."""
        return sum(f.record_bytes for f in self.fields.values())

    @property
    def nbytes(self) -> int:
        """Decoded bytes of the fields whose records have one size (encoded images of a
        fixed shape count their pixels); fields whose records vary (:attr:`varying`) are
        not known without reading them (a conversion measures them as they pass)."""
        sizes = (f.kind.decoded_record_bytes() for f in self.fields.values())
        return sum(n for n in sizes if n is not None) * self.count

    @property
    def varying(self) -> list[str]:
        """The fields whose decoded size is not in the schema (strings, ragged lists, byte
        strings, encoded images of varying shape): :attr:`nbytes` leaves them out."""
        return [n for n, f in self.fields.items() if f.kind.decoded_record_bytes() is None]


#: Records of zero bytes cost nothing to claim (an HDF5 or zarr shape ``(2**62, 0)``,
#: an .npy header ``(10**18, 0)``), yet every reader and writer walks the record
#: axis: a split may hold at most this many (found by a hostile-input pass).
MAX_EMPTY_RECORDS = 2**31


def check_empty_records(schema: Schema, path: str) -> None:
    """Refuse a split of more than :data:`MAX_EMPTY_RECORDS` records of zero bytes."""
    for split in schema.splits.values():
        for spec in split.fields.values():
            if split.count > MAX_EMPTY_RECORDS and spec.dense and spec.record_bytes == 0:
                raise SchemaError(
                    f"{path}: split {split.name!r}, field {spec.name!r}: {split.count:,} records "
                    f"of zero bytes each; more than {MAX_EMPTY_RECORDS:,} empty records is not data"
                )


#: where files written before the checksums had a slot of their own kept them: in the attrs
LEGACY_CHECKSUM_ATTR = "dstore.sha256"


@dataclass
class Schema:
    """All splits of a dataset plus dataset-level attributes."""

    splits: dict[str, SplitSpec]
    attrs: dict[str, Any] = field(default_factory=dict)
    #: split -> field -> sha256 of its values as written (:mod:`dstore.model.checksums`):
    #: dstore's own, stored under the schema's ``checksums`` key, never among ``attrs``
    checksums: dict[str, dict[str, str]] = field(default_factory=dict)
    #: the dataset's versions, oldest first, once it has been appended to (``dstore log``):
    #: one JSON object each (number, time, records per split, source...), stored under
    #: the schema's ``versions`` key; empty for a dataset written once (version 1)
    versions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Decoded bytes of the fixed-size fields of every split (:attr:`SplitSpec.nbytes`)."""
        return sum(s.nbytes for s in self.splits.values())

    @property
    def records(self) -> int:
        return sum(s.count for s in self.splits.values())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "splits": {
                s.name: {
                    "count": s.count,
                    "fields": {f.name: f.to_json() for f in s.fields.values()},
                }
                for s in self.splits.values()
            },
            "attrs": self.attrs,
        }
        if self.checksums:
            out["checksums"] = self.checksums
        if self.versions:
            out["versions"] = self.versions
        out["digest"] = schema_digest(out)
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Schema:
        """The schema ``to_json`` stored. One that carries a digest must match it: a
        byte lost in a key (``"attrs"`` -> ``"ttrs"``) still parses, and would deliver
        int8 codes as data or drop a field's attributes without a word. Schemas stored
        before the digest existed are read as they are."""
        if isinstance(data, Mapping) and "digest" in data:
            body = {k: v for k, v in data.items() if k != "digest"}
            if data["digest"] != schema_digest(body):
                raise SchemaError(
                    "the stored dstore schema does not match its digest (damaged or edited)"
                )
        try:
            splits = {}
            for sname, sdata in data["splits"].items():
                fields = {
                    fname: FieldSpec.from_json(fname, fdata)
                    for fname, fdata in sdata["fields"].items()
                }
                count = int(sdata["count"])
                if count < 0:
                    raise SchemaError(f"split {sname!r}: negative record count")
                splits[sname] = SplitSpec(sname, count, fields)
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            if isinstance(e, SchemaError):
                raise
            raise SchemaError(f"malformed schema: {e}") from e
        attrs = dict(data.get("attrs", {}))
        # files written before the checksums had a slot kept them among the attrs
        legacy = attrs.pop(LEGACY_CHECKSUM_ATTR, None)
        checksums = data.get("checksums", legacy)
        if not isinstance(checksums, Mapping):
            checksums = {}
        # a damaged entry is left out: verify then names each field it has no sha256 for
        sums = {str(s): dict(f) for s, f in checksums.items() if isinstance(f, Mapping)}
        versions = data.get("versions", [])
        if not isinstance(versions, list) or not all(isinstance(v, Mapping) for v in versions):
            raise SchemaError("malformed schema: 'versions' is not a list of objects")
        return cls(splits, attrs, sums, [dict(v) for v in versions])

    def with_fields(self, split: str, fields: Iterable[FieldSpec]) -> Schema:
        """A copy with the fields of ``split`` replaced."""
        splits = dict(self.splits)
        splits[split] = replace(splits[split], fields={f.name: f for f in fields})
        return Schema(splits, dict(self.attrs), dict(self.checksums), list(self.versions))


def schema_digest(data: Mapping[str, Any]) -> str:
    """sha256 (hex, 32 digits) of a stored schema's JSON in one canonical form."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def check_batch(split: SplitSpec, batch: Mapping[str, Column]) -> int:
    """Validate a batch against its split; return its row count.

    Dense fields: an ndarray of the field's dtype and record shape. Others: a
    :class:`~dstore.model.VarColumn` whose offsets describe its values, of
    the field's value dtype and inner shape (and valid UTF-8 for strings)."""
    if set(batch) != set(split.fields):
        raise SchemaError(
            f"split {split.name!r}: batch has fields {sorted(batch)}, "
            f"expected {sorted(split.fields)}"
        )
    rows = {
        name: len(a) if isinstance(a, VarColumn) or np.ndim(a) else -1 for name, a in batch.items()
    }
    if len(set(rows.values())) != 1:
        raise SchemaError(f"split {split.name!r}: batch fields differ in length: {rows}")
    for name, col in batch.items():
        spec = split.fields[name]
        where = f"split {split.name!r}, field {name!r}"
        if spec.dense:
            _check_dense(spec, col, where)
        else:
            _check_var(spec, col, where)
    return next(iter(rows.values()), 0)


def _check_dense(spec: FieldSpec, col: Column, where: str) -> None:
    """An ndarray of the field's record shape and dtype."""
    if isinstance(col, VarColumn):
        raise SchemaError(f"{where}: records vary in size, the field is {spec.kind.describe()}")
    if col.shape[1:] != spec.shape:
        raise SchemaError(f"{where}: record shape {col.shape[1:]}, expected {spec.shape}")
    if col.dtype != spec.dtype:
        raise SchemaError(f"{where}: dtype {col.dtype}, expected {spec.dtype}")


def _check_var(spec: FieldSpec, col: Column, where: str) -> None:
    """A VarColumn whose offsets describe its values, nested for lists of strings, of the
    field's value dtype and inner shape, valid UTF-8 for text."""
    if not isinstance(col, VarColumn):
        raise SchemaError(f"{where}: expected values + offsets for a {spec.kind.describe()} field")
    col.check(where)
    if isinstance(spec.kind, StringList) or isinstance(col.values, VarColumn):
        if not (isinstance(spec.kind, StringList) and isinstance(col.values, VarColumn)):
            raise SchemaError(
                f"{where}: a {spec.kind.describe()} field needs "
                + ("nested" if isinstance(spec.kind, StringList) else "flat")
                + " values + offsets"
            )
        if spec.kind.text:
            col.check_utf8(where)
        return
    if col.values.dtype != spec.dtype:
        raise SchemaError(f"{where}: values are {col.values.dtype}, expected {spec.dtype}")
    inner = spec.shape if isinstance(spec.kind, Ragged) else ()
    if col.values.shape[1:] != inner:
        raise SchemaError(
            f"{where}: values have inner shape {col.values.shape[1:]}, expected {inner}"
        )
    if isinstance(spec.kind, String):
        col.check_utf8(where)


def batch_rows_for(
    split: SplitSpec, batch_bytes: int = DEFAULT_BATCH_BYTES, stored_record_bytes: int = 0
) -> int:
    """Rows per batch so that one batch of all fields stays under ``batch_bytes``
    (records sized by the schema, or by ``stored_record_bytes`` when larger: a reader's
    measure of what varying records take, :meth:`Reader.stored_record_bytes`)."""
    return max(1, batch_bytes // max(1, split.record_bytes, stored_record_bytes))
