"""A reader wrapper: fields stored in a lossy form (int8/uint8 codes, bfloat16) read as
the values they stand for (:mod:`dstore.model.precision` holds the arithmetic)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..abc import Reader, WrappingReader
from ..model.precision import decode_batch, logical_schema
from ..model.schema import Batch, Schema, SplitSpec


class LogicalReader(WrappingReader):
    """A reader whose schema and batches are the decoded values (bfloat16, float32 from
    int8 codes); everything else (integrity, ranges, describe) is the stored reader's.

    Checksums are of the stored values, so ``iter_batches`` verifies before decoding."""

    def __init__(self, reader: Reader, schema: Schema) -> None:
        super().__init__(reader)
        self.stored_schema = reader.schema
        self.schema = schema
        self.notes = reader.notes

    def iter_batches(self, split: str, **kwargs: Any) -> Iterator[Batch]:
        stored, logical = self.stored_schema.splits.get(split), self.schema.splits.get(split)
        for batch in self.inner.iter_batches(split, **kwargs):
            if stored is None:
                yield batch
                continue
            assert logical is not None  # self.schema is logical_schema(stored_schema): same splits
            yield decode_batch(stored, logical, batch)

    def read_records(self, split: str, indexes: Any, fields: Sequence[str] | None = None) -> Batch:
        stored = self.stored_schema.splits[split]
        names = list(fields) if fields is not None else list(self.split(split).fields)
        batch = self.inner.read_records(split, indexes, names)
        return decode_batch(stored, self.schema.splits[split], batch)

    def _iter(
        self, spec: SplitSpec, names: list[str], start: int, stop: int, rows: int
    ) -> Iterator[Batch]:
        stored = self.stored_schema.splits[spec.name]
        for batch in self.inner._iter(stored, names, start, stop, rows):
            yield decode_batch(stored, spec, batch)

    def describe(self) -> list[str]:
        return self.inner.describe()


def logical_reader(reader: Any) -> Any:
    """``reader`` itself unless some field needs decoding on read."""
    schema = logical_schema(reader.schema)
    return reader if schema is reader.schema else LogicalReader(reader, schema)


# ------------------------------------------------------------------ tolerance (verify)
