"""The reading half of the format interface: :class:`Reader` and :class:`WrappingReader`.

A reader has ``.schema`` and yields the records of one split in order, as
batches (``iter_batches``); a format implements ``_iter`` over a record range
already checked, and says how its records are cut into ranges that are cheap to
read alone (``record_ranges``): those are what the training readers hand to
workers and shuffle. A whole-field read is checked against the sha256 dstore
stored when it wrote the field (:mod:`dstore.model.checksums`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CodecIOError, SchemaError
from ..model import Column, concat_columns, take_column
from ..model.checksums import FieldHasher, stored_checksums
from ..model.schema import (
    DEFAULT_SPLIT,
    Batch,
    FieldSpec,
    Schema,
    SplitSpec,
    batch_rows_for,
)

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "DEFAULT_SPLIT_NOTE",
    "RANGE_BYTES",
    "Reader",
    "WrappingReader",
    "checked_indexes",
    "even_ranges",
    "runs_of",
    "take_records",
]

#: Decoded bytes a record range of :meth:`Reader.record_ranges` aims at: big
#: enough to amortise opening a shard or chunk, small enough to shuffle and
#: to balance between training workers.
RANGE_BYTES = 8 * 1024 * 1024
#: What messages and ``dstore info`` say of the split :data:`DEFAULT_SPLIT` where it appears.
DEFAULT_SPLIT_NOTE = f"{DEFAULT_SPLIT!r} is dstore's name for data that names no split"


def even_ranges(start: int, stop: int, rows: int) -> list[tuple[int, int]]:
    """``start:stop`` cut into consecutive ranges of ``rows`` records (the last may be shorter)."""
    return [(a, min(a + rows, stop)) for a in range(start, stop, max(1, rows))]


def runs_of(positions: np.ndarray) -> list[tuple[int, int]]:
    """Sorted distinct ``positions`` as runs ``(start, stop)`` of consecutive ones."""
    if not len(positions):
        return []
    breaks = np.flatnonzero(np.diff(positions) != 1) + 1
    starts = positions[np.concatenate([[0], breaks])]
    stops = positions[np.concatenate([breaks - 1, [len(positions) - 1]])] + 1
    return list(zip(starts.tolist(), stops.tolist(), strict=True))


def checked_indexes(indexes: Any, count: int, what: str) -> np.ndarray:
    """``indexes`` as an int64 array of record positions in ``0..count-1``, or an
    ``IndexError`` naming ``what`` (the split) and the first one out of range."""
    idx = np.asarray(indexes, dtype=np.int64).reshape(-1)
    bad = np.flatnonzero((idx < 0) | (idx >= count))
    if len(bad):
        raise IndexError(f"record {int(idx[bad[0]])} out of range for {what} of {count}")
    return idx


def _concat(parts: list[Column], spec: FieldSpec) -> Column:
    """One column from batches, keeping the field's dtype (numpy would make it native-endian)."""
    return concat_columns(spec.kind, parts)


class Reader(ABC):
    """Reads one dataset; a context manager."""

    schema: Schema
    path: str
    #: True when any record range can be read without reading what precedes it
    #: (False for compressed npz members, which only stream).
    random_access: bool = True
    #: Why one record cannot be read without reading those before it in its shard,
    #: or None when it can: a map-style training dataset (``ds[i]``) needs it.
    sequential_reason: str | None = None
    #: what the reader could not carry (attributes of unsupported types), for the summary
    notes: Sequence[str] = ()

    def iter_batches(
        self,
        split: str,
        *,
        fields: Sequence[str] | None = None,
        start: int = 0,
        stop: int | None = None,
        batch_rows: int | None = None,
        verify: bool = True,
    ) -> Iterator[Batch]:
        """Yield batches of records ``start:stop`` of ``split`` in order.

        A read of whole fields is checked against the sha256 dstore stored
        when it wrote them (``dstore.model.checksums``): damage that decodes without
        error (a blosc chunk has no checksum) raises at the end of the read,
        as a zip member's CRC does."""
        spec, start, stop = self._range(split, start, stop)
        names = list(fields) if fields is not None else list(spec.fields)
        batches = self._iter(spec, names, start, stop, self._rows(spec, batch_rows))
        expected = stored_checksums(self.schema)
        if verify and expected is not None and start == 0 and stop == spec.count:
            return self._verified(batches, spec, names, expected.get(split, {}))
        return batches

    def _verified(
        self,
        batches: Iterator[Batch],
        spec: SplitSpec,
        names: list[str],
        expected: Mapping[str, Any],
    ) -> Iterator[Batch]:
        hasher = FieldHasher(Schema({spec.name: spec}))
        for batch in batches:
            hasher.update(spec.name, batch)
            yield batch
        got = hasher.hexdigests()[spec.name]
        for name in names:
            if name in expected and expected[name] != got[name]:
                raise CodecIOError(
                    f"{self.path}: split {spec.name!r}, field {name!r}: the values differ from the "
                    "sha256 stored when they were written (corrupt data)"
                )

    @abstractmethod
    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        """Batches of at most ``rows`` records of fields ``names``, records ``start:stop``."""

    def read_records(
        self, split: str, indexes: Sequence[int] | np.ndarray, fields: Sequence[str] | None = None
    ) -> Batch:
        """The records at positions ``indexes`` of ``split`` (any order; a position may
        repeat), as one batch in the order asked: what a global shuffle and a map-style
        dataset read, a window or a batch of positions at a time.

        Only what holds the records asked is read: the default reads each run of
        consecutive positions with :meth:`iter_batches`; a format whose single records
        are cheaper to reach (a record index, a member index, chunks) overrides it.
        The stored whole-field checksums are not checked (they cover whole fields);
        each format's own checks (CRCs, lengths, frames) are."""
        spec = self.split(split)
        names = list(fields) if fields is not None else list(spec.fields)
        idx = checked_indexes(indexes, spec.count, f"split {split!r}")
        wanted = np.unique(idx)
        parts: dict[str, list[Column]] = {n: [] for n in names}
        for a, b in runs_of(wanted):
            for batch in self.iter_batches(
                split, fields=names, start=a, stop=b, batch_rows=b - a, verify=False
            ):
                for n in names:
                    parts[n].append(batch[n])
        cols = {n: _concat(parts[n], spec.fields[n]) for n in names}
        return take_records(cols, wanted, idx)

    def record_units(self, split: str) -> np.ndarray | None:
        """Where the units a read of ``split`` fetches whole begin (and, last, the
        record count), when one record costs the read of its unit: a zarr/HDF5 chunk,
        a Parquet row group. None (the default) when each record is read alone at about
        its own cost (a record index, a member index, ArrayRecord, stored npz rows).

        A global shuffle visits the units in a random order and shuffles records
        within windows of several units, so that each unit is read once per epoch."""
        return None

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        """Contiguous record ranges covering ``split`` in order, each cheap to read alone.

        Training readers (``dstore.readers``) hand whole ranges to workers, so
        a range follows the storage's own units (a TFRecord shard, whole
        zarr/HDF5 chunks) and holds about ``target_bytes`` of decoded records.
        The default cuts equal blocks (npz members are plain row ranges)."""
        spec = self.split(split)
        return even_ranges(0, spec.count, max(1, target_bytes // max(1, spec.record_bytes)))

    def check_ranges(self, split: str) -> None:
        """Check what reads of record ranges of ``split`` do not (an npz member's CRC-32
        covers the whole member), raising the error a whole read would. For a
        conversion whose shards are written by processes that each read a range."""
        return None  # most formats check each range as they read it

    def read(self, split: str, fields: Sequence[str] | None = None) -> dict[str, Column]:
        """Whole split in memory (convenience for small data and tests): an ndarray per
        dense field, values + offsets (:class:`~dstore.model.VarColumn`) per other field."""
        spec = self.split(split)
        names = list(fields) if fields is not None else list(spec.fields)
        parts: dict[str, list[Column]] = {n: [] for n in names}
        for batch in self.iter_batches(split, fields=names):
            for n in names:
                parts[n].append(batch[n])
        return {n: _concat(p, spec.fields[n]) for n, p in parts.items()}

    def split(self, name: str) -> SplitSpec:
        try:
            return self.schema.splits[name]
        except KeyError:
            names = ", ".join(self.schema.splits) or "none"
            note = f" ({DEFAULT_SPLIT_NOTE})" if DEFAULT_SPLIT in self.schema.splits else ""
            raise SchemaError(f"{self.path}: no split {name!r}; splits: {names}{note}") from None

    def describe(self) -> list[str]:
        """Codec-specific lines for ``dstore info`` (storage details)."""
        return []

    def stored_record_bytes(self, split: str) -> int:
        """Average stored bytes per record of ``split`` when the reader knows it cheaply
        (0 otherwise): batches of large varying records (80 MiB byte strings) are then
        sized by it, not by a nominal size that would put thousands in one batch. A
        wrapping reader (``inner``: decoded images, dtype views, dropped fields) answers
        for what it wraps."""
        inner = getattr(self, "inner", None) or getattr(self, "_inner", None)
        if isinstance(inner, Reader) and split in inner.schema.splits:
            return inner.stored_record_bytes(split)
        return 0

    def lossy_fields(self, split: str) -> Mapping[str, Any]:
        """Fields of ``split`` stored in a lossy image encoding, each with its
        :class:`~dstore.images.imagecodec.LossyImage`: ``verify`` measures their error
        against the bound it declares instead of comparing bits."""
        return {}

    def check_integrity(self) -> list[tuple[bool, str]]:
        """Checks of the stored bytes beyond decoding (checksums in a manifest): (ok, what)."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook: readers without handles keep it
        """Release file handles."""

    def _range(self, split: str, start: int, stop: int | None) -> tuple[SplitSpec, int, int]:
        spec = self.split(split)
        stop = spec.count if stop is None else min(stop, spec.count)
        if start < 0 or start > stop:
            raise ValueError(f"bad record range {start}:{stop} for split {split!r}")
        return spec, start, stop

    @staticmethod
    def _rows(spec: SplitSpec, batch_rows: int | None) -> int:
        return batch_rows if batch_rows else batch_rows_for(spec)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def take_records(cols: Mapping[str, Column], wanted: np.ndarray, idx: np.ndarray) -> Batch:
    """Columns of the records at sorted distinct positions ``wanted``, as the records at
    positions ``idx`` (each one of ``wanted``), in that order."""
    if len(idx) == len(wanted) and np.array_equal(idx, wanted):
        return dict(cols)
    where = np.searchsorted(wanted, idx)
    return {n: take_column(c, where) for n, c in cols.items()}


class WrappingReader(Reader):
    """A reader over another (``inner``): its records, some fields changed or left out
    (decoded images, lossy-stored values, dropped fields, metered sizes). The storage
    facts (path, random access, record ranges, integrity) and anything codec-specific
    (``encodings``, ``shards``...) are ``inner``'s; a subclass sets ``schema`` and
    implements ``_iter``."""

    def __init__(self, inner: Reader) -> None:
        self.inner = inner
        self.path = inner.path
        self.random_access = inner.random_access
        self.sequential_reason = inner.sequential_reason

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        return self.inner.record_ranges(split, target_bytes)

    def record_units(self, split: str) -> np.ndarray | None:
        return self.inner.record_units(split)

    def check_integrity(self) -> list[tuple[bool, str]]:
        return self.inner.check_integrity()

    def check_ranges(self, split: str) -> None:
        self.inner.check_ranges(split)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # codec-specific extras (encodings, shards, ...)
        return getattr(self.__dict__["inner"], name)
