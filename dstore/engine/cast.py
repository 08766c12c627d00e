"""The one conversion loop: read a record range -> check it -> apply the dtype policy.

Every write path pulls its records through :func:`cast_batches`: the
single-writer path (:func:`write_splits`, which also hashes and writes) and the
sharded path (:mod:`dstore.engine.run`, which cuts the stream into shards, locally
or on a Dask worker). So the schema check, the dtype policy and the record
count are applied in one place, and the two paths cannot drift apart.

Dependencies go one way: ``dstore.api`` -> ``dstore.engine.run`` -> this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from ..abc import Reader, Writer
from ..errors import SchemaError
from ..model.checksums import FieldHasher
from ..model.schema import DEFAULT_BATCH_BYTES, Batch, Schema, batch_rows_for, check_batch
from ..parallel import prefetch
from .dtypes import CastStats, DtypePolicy

__all__ = ["BatchObserver", "Progress", "cast_batches", "write_splits"]

#: Called after each batch with (records in the batch, records in the whole dataset).
Progress = Callable[[int, int], None]


class BatchObserver(Protocol):
    """Sees every record a conversion writes, once, without a second read
    (``convert --check``: :class:`dstore.check.ConvertCheck`): :meth:`begin` with the
    output schema, then a call per batch as cast, from any thread."""

    def begin(self, schema: Schema) -> None: ...

    def __call__(self, split: str, start: int, batch: Batch) -> None: ...


def cast_batches(
    reader: Reader,
    split: str,
    policy: DtypePolicy,
    stats: dict[str, CastStats],
    *,
    start: int = 0,
    stop: int | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    observe: BatchObserver | None = None,
) -> Iterator[Batch]:
    """Records ``start:stop`` of ``split`` (default: all), checked against the
    reader's schema and cast by ``policy``, exactly as they will be written.

    Raises :class:`~dstore.errors.SchemaError` when the reader yields another
    number of records than the range holds: the only record-count check of a
    conversion, since every write path reads through here."""
    spec = reader.schema.splits[split]
    stop = spec.count if stop is None else stop
    pos = start
    for batch in reader.iter_batches(
        split,
        start=start,
        stop=stop,
        batch_rows=batch_rows_for(spec, batch_bytes, reader.stored_record_bytes(split)),
    ):
        n = check_batch(spec, batch)
        out = policy.apply(spec, batch, pos, stats, reader.path)
        if observe is not None:  # convert --check: the records as written
            observe(split, pos, out)
        yield out
        pos += n
    if pos != stop:
        raise SchemaError(
            f"{reader.path}: split {split!r} yielded records {start}:{pos}, "
            f"its schema says {start}:{stop}"
        )


def write_splits(
    reader: Reader,
    writer: Writer,
    policy: DtypePolicy,
    stats: dict[str, CastStats],
    hasher: FieldHasher,
    *,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    progress: Progress | None = None,
    observe: BatchObserver | None = None,
) -> None:
    """Every split of ``reader``, in schema order, through :func:`cast_batches` into
    ``writer``, hashing each field's values as written; the next batch is read in a
    background thread while this one is written."""
    total = reader.schema.records
    for split in reader.schema.splits.values():
        for batch in prefetch(
            cast_batches(
                reader, split.name, policy, stats, batch_bytes=batch_bytes, observe=observe
            )
        ):
            hasher.update(split.name, batch)
            writer.write(split.name, batch)
            if progress is not None:
                progress(len(next(iter(batch.values()))), total)
