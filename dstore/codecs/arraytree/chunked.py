"""Shared by the chunked array containers (zarr, HDF5): chunk sizing and aligned writes."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...abc import RANGE_BYTES, Reader, checked_indexes, even_ranges, runs_of, take_records
from ...errors import CodecIOError, DstoreError, SchemaError
from ...limits import env_limit
from ...model import Column, Kind, Tensor, concat_columns, take_column
from ...model.attrs import encode_all, with_groups
from ...model.keys import ROOT_SPLITS_ATTR, stored_paths
from ...model.schema import Batch, FieldSpec, Schema, SplitSpec

__all__ = [
    "MAX_CHUNK_BYTES",
    "MAX_FILL_BYTES",
    "AlignedAppender",
    "ArrayTreeReader",
    "chunk_rows",
    "error_reason",
    "max_chunk_bytes",
    "max_fill_bytes",
]

#: Decoded bytes one stored chunk may declare before it is read: a 50 kB store can
#: hold a chunk that decodes to 1.6 GB. 1 GiB is a thousand times dstore's own
#: chunks (1 MiB); raise it by setting this, or the environment variable
#: ``DSTORE_MAX_CHUNK_BYTES`` (which wins).
MAX_CHUNK_BYTES = 1 << 30
#: Bytes of fill value an array may read from chunks it declares but does not store
#: (zarr reads a missing chunk as the fill value: a 1 kB store can declare 10**15
#: records). Raise it by setting this, or ``DSTORE_MAX_FILL_BYTES`` (which wins).
MAX_FILL_BYTES = 1 << 30


#: decoded bytes of a field's records between the first and last asked that a read at
#: positions fetches in one slice (small fields: a call per run costs more than the bytes)
SPAN_BYTES = 4 * 1024 * 1024


def max_chunk_bytes() -> int:
    """The per-chunk limit in force: ``DSTORE_MAX_CHUNK_BYTES`` if set, else :data:`MAX_CHUNK_BYTES`."""
    return env_limit("DSTORE_MAX_CHUNK_BYTES", MAX_CHUNK_BYTES)


def max_fill_bytes() -> int:
    """The unstored-data limit in force: ``DSTORE_MAX_FILL_BYTES`` if set, else :data:`MAX_FILL_BYTES`."""
    return env_limit("DSTORE_MAX_FILL_BYTES", MAX_FILL_BYTES)


def error_reason(e: BaseException) -> str:
    """An exception as the reason of an error line, never empty (a ``MemoryError`` has no text)."""
    if isinstance(e, MemoryError):
        return f"out of memory (MemoryError{': ' + str(e) if str(e) else ''})"
    return str(e) or type(e).__name__


def chunk_rows(spec: FieldSpec, count: int, chunk_bytes: int) -> int:
    """Records per chunk so that a chunk holds about ``chunk_bytes``."""
    return max(1, min(max(count, 1), chunk_bytes // max(1, spec.record_bytes)))


class AlignedAppender:
    """Buffers appended rows so every store call covers whole chunks.

    Writing a batch that ends mid-chunk would make the library read, modify
    and rewrite that chunk on the next batch; buffering the tail avoids it.
    """

    def __init__(self, rows_per_chunk: int, store: Callable[[int, np.ndarray], None]) -> None:
        self.rows = rows_per_chunk
        self.store = store
        self.pos = 0  # rows handed to ``store`` so far
        self._tail: list[np.ndarray] = []

    def append(self, arr: np.ndarray) -> None:
        if self._tail:
            self._tail.append(arr)
            # astype: np.concatenate would turn big-endian data native-endian
            arr = np.concatenate(self._tail).astype(arr.dtype, copy=False)
            self._tail = []
        whole = (len(arr) // self.rows) * self.rows
        if whole:
            self.store(self.pos, arr[:whole])
            self.pos += whole
        if whole < len(arr):
            self._tail = [arr[whole:]]

    def flush(self) -> None:
        if self._tail:
            arr = np.concatenate(self._tail).astype(self._tail[0].dtype, copy=False)
            self.store(self.pos, arr)
            self.pos += len(arr)
            self._tail = []


class ArrayTreeReader(Reader):
    """Shared by readers of group trees of sliceable arrays (zarr, HDF5).

    Subclasses fill ``self.arrays`` ((split, field) -> array, as the tree
    reads) and ``self.by_path`` (``group/.../array`` -> array) while walking
    their tree, then call :meth:`_build_schema`: with dstore's stored schema,
    each field is found where :func:`dstore.model.schema.stored_paths` stored it, so
    escaped names come back as the originals.
    """

    #: exceptions a corrupt chunk raises in the backend library
    read_errors: tuple[type[BaseException], ...] = (Exception,)

    path: str
    arrays: dict[tuple[str, str], Any]
    by_path: dict[str, Any]
    #: what the tree holds that dstore cannot carry (filled while reading attributes)
    notes: list[str]
    #: groups that are splits (split name -> group), for their attributes
    groups: dict[str, Any]

    def _field_key(self, arr: Any) -> str | None:
        """The array's original name, kept as the field's key."""
        return None

    def _field_attrs(self, arr: Any) -> dict[str, Any]:
        """``FieldSpec.attrs`` of an array: user attributes and fill value (dstore.model.attrs, stored under the key dstore.attrs)."""
        return {}

    def _root_attrs(self) -> dict[str, Any]:
        """The root's user attributes, encoded."""
        return {}

    def _attr_notes(self, attrs: Any, where: str, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """Encoded attributes; the ones of types dstore cannot carry go to ``self.notes``."""
        try:
            encoded, notes = encode_all(attrs, where, skip)
        except Exception as e:  # noqa: BLE001 - damaged metadata arrives as any type from the library
            raise CodecIOError(f"{where}: unreadable attributes: {type(e).__name__}: {e}") from None
        self.notes.extend(notes)
        return encoded

    def _dtype_matches(self, spec: np.dtype, stored: np.dtype) -> bool:
        return spec == stored

    def _kind_of(self, arr: Any) -> Kind:
        """The kind a foreign array holds (a subclass reads strings and variable-length data)."""
        return Tensor(np.dtype(arr.dtype), tuple(arr.shape[1:]))

    def _stores(self, arr: Any, spec: FieldSpec, count: int) -> bool:
        """Can ``arr`` hold ``spec``'s records as dstore writes them?"""
        return tuple(arr.shape) == (count, *spec.shape) and self._dtype_matches(
            spec.dtype, np.dtype(arr.dtype)
        )

    def _read_column(self, spec: FieldSpec, arr: Any, start: int, stop: int) -> Column:
        """Records ``start:stop`` of ``arr`` as a column of ``spec``'s kind."""
        return np.asarray(arr[start:stop]).astype(spec.dtype, copy=False)

    def _split_spec(self, split: str) -> SplitSpec:
        members = {f: a for (s, f), a in self.arrays.items() if s == split}
        counts = {f: a.shape[0] for f, a in members.items()}
        if len(set(counts.values())) > 1:
            raise SchemaError(
                f"{self.path}: fields of split {split!r} have different record counts {counts}"
            )
        fields = {
            f: FieldSpec(f, self._kind_of(a), self._field_key(a), self._field_attrs(a))
            for f, a in members.items()
        }
        return SplitSpec(split, next(iter(counts.values()), 0), fields)

    def _build_schema(self, stored: Mapping[str, Any] | None) -> Schema:
        """The schema stored by dstore if it still describes the arrays, else the inferred one."""
        if stored is None:
            splits = {s: self._split_spec(s) for s in dict.fromkeys(k[0] for k in self.arrays)}
            groups = getattr(self, "groups", {})
            split_attrs = {
                s: self._attr_notes(groups[s].attrs, f"{self.path}: group {s!r}")
                for s in splits
                if s in groups
            }
            attrs = with_groups({}, self._root_attrs(), split_attrs)
            # splits whose arrays all lie at the root (no group): written there again
            path_of = {id(a): p for p, a in self.by_path.items()}
            at_root = [
                s
                for s, spec in splits.items()
                if spec.fields
                and all("/" not in path_of.get(id(self.arrays[(s, f)]), "/") for f in spec.fields)
            ]
            if at_root:
                attrs[ROOT_SPLITS_ATTR] = at_root
            return Schema(splits, attrs)
        try:
            schema = Schema.from_json(stored)
        except SchemaError as e:
            raise CodecIOError(
                f"{self.path}: dstore's stored schema is unreadable (corrupt?): {e}"
            ) from None
        # dstore wrote both: a disagreement is damage (or an edit by another
        # tool), and reading on would return records the writer never wrote.
        where_stored = stored_paths(schema)
        self.arrays = {k: self.by_path[p] for k, p in where_stored.items() if p in self.by_path}
        for split in schema.splits.values():
            for spec in split.fields.values():
                arr = self.arrays.get((split.name, spec.name))
                where = f"{self.path}: split {split.name!r}, field {spec.name!r}"
                if arr is None:
                    raise CodecIOError(f"{where}: missing, though dstore's stored schema lists it")
                if not self._stores(arr, spec, split.count):
                    raise CodecIOError(
                        f"{where}: array is {np.dtype(arr.dtype)} {tuple(arr.shape)}, dstore's stored schema "
                        f"says {split.count} records of {spec.kind.describe()} (corrupt or edited metadata)"
                    )
        self._check_extra(where_stored)
        return schema

    def _check_extra(self, where_stored: Mapping[tuple[str, str], str]) -> None:
        """Refuse arrays the stored schema does not list (but those of an append being
        written: a store ``growing``)."""
        extra = (
            set(self.by_path) - set(where_stored.values()) - self._companions(where_stored.values())
        )
        if extra and not getattr(self, "growing", False):
            listed = ", ".join(sorted(extra))
            raise CodecIOError(
                f"{self.path}: arrays {listed} are not in dstore's stored schema (edited?)"
            )

    def _companions(self, paths: Any) -> set[str]:
        """Arrays that belong to a field stored at one of ``paths`` (e.g. its shapes)."""
        return set()

    def _chunk_rows(self, split: str, spec: SplitSpec) -> int:
        """Records per chunk of the split's largest field (the one whose reads cost most)."""
        big = max(spec.fields.values(), key=lambda f: f.record_bytes)
        chunks = getattr(self.arrays.get((split, big.name)), "chunks", None)
        return int(chunks[0]) if chunks else 1  # HDF5 contiguous datasets have no chunks

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        """Whole chunks of the split's largest field (the one whose reads cost most)."""
        spec = self.split(split)
        if not spec.fields:
            return even_ranges(0, spec.count, spec.count or 1)
        chunk = self._chunk_rows(split, spec)
        per = max(1, target_bytes // max(1, chunk * spec.record_bytes))
        return even_ranges(0, spec.count, chunk * per)

    def record_units(self, split: str) -> np.ndarray | None:
        """A record costs the decoding of its chunk (of the largest field): their bounds."""
        spec = self.split(split)
        chunk = self._chunk_rows(split, spec) if spec.fields else 1
        if chunk <= 1:
            return None
        return np.array([*range(0, spec.count, chunk), spec.count], np.int64)

    def read_records(
        self, split: str, indexes: Sequence[int] | np.ndarray, fields: Sequence[str] | None = None
    ) -> Batch:
        """The records at ``indexes``: each run of consecutive positions read as a slice,
        in storage order, so a chunk holding several is decoded once (the kept last chunk)."""
        spec = self.split(split)
        names = list(fields) if fields is not None else list(spec.fields)
        idx = checked_indexes(indexes, spec.count, f"split {split!r}")
        wanted = np.unique(idx)
        runs = runs_of(wanted)
        cols = {name: self._field_at(spec, name, wanted, runs) for name in names}
        return take_records(cols, wanted, idx)

    def _field_at(
        self, spec: SplitSpec, name: str, wanted: np.ndarray, runs: list[tuple[int, int]]
    ) -> Column:
        """Records at sorted distinct positions ``wanted`` (``runs`` of consecutive ones)
        of field ``name``."""
        field = spec.fields[name]
        lo, hi = (int(wanted[0]), int(wanted[-1]) + 1) if len(wanted) else (0, 0)
        if len(runs) > 1 and (hi - lo) * field.record_bytes <= SPAN_BYTES:
            # small records (labels, ids): one read of their span, not one per run
            return take_column(self._field(spec, name, lo, hi), wanted - lo)
        parts = [self._field(spec, name, a, b) for a, b in runs]
        return concat_columns(field.kind, parts)

    def _field(self, spec: SplitSpec, name: str, start: int, stop: int) -> Column:
        """Records ``start:stop`` of field ``name``; an error names the split, field, records."""
        arr = self.arrays[(spec.name, name)]
        return self._named_read(
            spec, name, start, stop, lambda: self._read_column(spec.fields[name], arr, start, stop)
        )

    def _named_read(
        self, spec: SplitSpec, name: str, start: int, stop: int, read: Callable[[], Column]
    ) -> Column:
        """``read()`` of records ``start:stop`` (the first to the last asked) of field
        ``name``; an error names the split, field and records."""
        split = spec.name
        try:
            return read()
        except DstoreError as e:
            raise _named(e, self.path, split, name) from None
        except self.read_errors as e:
            raise CodecIOError(
                f"{self.path}: split {split!r}, field {name!r}, records {start}..{stop - 1}: "
                f"unreadable: {error_reason(e)}"
            ) from None

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        for pos in range(start, stop, rows):
            end = min(stop, pos + rows)
            yield {name: self._field(spec, name, pos, end) for name in names}


def _named(e: DstoreError, path: str, split: str, field: str) -> DstoreError:
    """``e`` naming the split and field it happened in (a column reader names the file,
    its array and the record; the split and field are known here)."""
    msg = str(e)
    if f"split {split!r}" in msg or not msg.startswith(f"{path}: "):
        return e
    rest = msg[len(path) + 2 :]
    return type(e)(f"{path}: split {split!r}, field {field!r}, {rest}")
