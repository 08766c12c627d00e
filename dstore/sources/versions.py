"""Reading a dataset as it was at one of its versions, and two readers as one.

Every dataset dstore wrote has versions: the first write is version 1, each append or
compaction the next (:mod:`dstore.sharding.versions` for folders of shards; the
``versions`` record of the schema for the others). :func:`at_version` turns an open
reader into one of version ``N``, by capability, naming no format:

- a reader that selects versions itself (``select_version``: a sharded folder, whose
  versions are manifests pinning their shards' sha256) reads that manifest;
- a reader whose schema records versions reads version ``N``'s splits and first
  records (:class:`VersionView`): appends to zarr only add records after those, so
  version ``N`` is a prefix; a format rewritten by each append (npz, HDF5, JSON) kept
  only its latest version, and asking for another is one :class:`VersionError` line;
- any other dataset has one version, 1.

:class:`Concatenated` reads one dataset's records, then another's, split by split:
what an append that rewrites its dataset writes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..abc import RANGE_BYTES, Reader, WrappingReader
from ..errors import VersionError
from ..model.schema import Batch, Schema, SplitSpec

__all__ = ["Concatenated", "VersionView", "at_version", "version_of"]


def version_of(reader: Reader) -> int:
    """The version ``reader`` reads (1 for a dataset without versions)."""
    number = getattr(reader, "version", None)
    if isinstance(number, int):
        return number
    history = reader.schema.versions
    return int(history[-1]["version"]) if history else 1


def at_version(reader: Reader, number: int | None) -> Reader:
    """``reader`` as of version ``number`` (None: as it is, its latest); the reader's
    ``version`` says which it reads."""
    if hasattr(reader, "select_version"):
        reader.select_version(number)
        return reader
    history = reader.schema.versions
    latest = int(history[-1]["version"]) if history else 1
    if number is None or number == latest:
        reader.version = latest  # type: ignore[attr-defined]
        return reader
    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= latest:
        raise VersionError(f"{reader.path}: no version {number!r}; its versions are 1..{latest}")
    record = history[number - 1]
    if not record.get("readable", True):
        raise VersionError(
            f"{reader.path}: version {number} was replaced by version {latest}: this format is "
            "written whole again by each append and keeps its latest version only"
        )
    return VersionView(reader, number, record)


class VersionView(WrappingReader):
    """The splits and first records of ``inner`` that version ``number`` held
    (``record``: its entry in the schema's versions)."""

    def __init__(self, inner: Reader, number: int, record: Mapping[str, Any]) -> None:
        super().__init__(inner)
        self.version = number
        schema = inner.schema
        counts = {str(k): int(v) for k, v in record.get("records", {}).items()}
        splits = {
            name: SplitSpec(name, counts[name], spec.fields)
            for name, spec in schema.splits.items()
            if name in counts
        }
        # a whole-split read is checked against version 1's checksums (a later version's
        # records are checked per version by verify)
        first = schema.versions[0].get("checksums") if schema.versions else None
        sums = dict(first or {}) if number == 1 else {}
        self.schema = Schema(splits, dict(schema.attrs), dict(sums), schema.versions[:number])

    def record_ranges(self, split: str, target_bytes: int = RANGE_BYTES) -> list[tuple[int, int]]:
        count = self.split(split).count
        out = []
        for a, b in self.inner.record_ranges(split, target_bytes):
            if a < count:
                out.append((a, min(b, count)))
        return out

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        return self.inner.iter_batches(
            spec.name, fields=names, start=start, stop=stop, batch_rows=rows, verify=False
        )

    def describe(self) -> list[str]:
        return self.inner.describe()


class Concatenated(Reader):
    """``first``'s records, then ``then``'s, split by split; ``schema`` is the dataset
    they make (a split only ``then`` has comes after ``first``'s splits)."""

    def __init__(self, first: Reader, then: Reader, schema: Schema) -> None:
        self.first, self.then = first, then
        self.path = then.path
        self.schema = schema
        self.random_access = first.random_access and then.random_access
        self.notes = [*first.notes, *then.notes]

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        before = self.first.schema.splits.get(spec.name)
        head = before.count if before is not None else 0
        if start < head:
            yield from self.first.iter_batches(
                spec.name, fields=names, start=start, stop=min(stop, head), batch_rows=rows
            )
        if stop > head:
            yield from self.then.iter_batches(
                spec.name,
                fields=names,
                start=max(0, start - head),
                stop=stop - head,
                batch_rows=rows,
            )

    def close(self) -> None:
        self.first.close()
        self.then.close()
