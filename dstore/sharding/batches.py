"""Batches across shard boundaries and record ranges of shards read a group at a time.

- :func:`rebatch`: batches of exactly ``rows`` records from per-shard ones;
- :func:`group_ranges` / :func:`group_slices`: record ranges and reads of a split
  whose shards are read by groups (Parquet row groups).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from ..model import column_len, concat_columns
from ..model.schema import Batch, SerializedBatch, SplitSpec, slice_batch

__all__ = ["group_ranges", "group_slices", "rebatch"]


def _join(spec: SplitSpec, names: list[str], parts: list[Batch]) -> Batch:
    """One batch from consecutive ones, keeping serialized records a writer may copy."""
    if len(parts) == 1:
        return parts[0]
    cols = {n: concat_columns(spec.fields[n].kind, [p[n] for p in parts]) for n in names}
    first = parts[0]
    if isinstance(first, SerializedBatch) and all(
        isinstance(p, SerializedBatch) and p.signature == first.signature for p in parts
    ):
        records = [r for p in parts for r in p.records]  # type: ignore[attr-defined]
        return SerializedBatch(cols, records, first.signature)
    return cols


def rebatch(
    batches: Iterator[Batch], spec: SplitSpec, names: list[str], rows: int
) -> Iterator[Batch]:
    """Batches of exactly ``rows`` records (the last may be shorter) from per-shard ones.

    Readers promise batches of ``rows`` across shard boundaries (``verify`` walks
    two readers side by side); a batch inside one shard passes through uncopied."""
    pending: list[Batch] = []
    have = 0
    for batch in batches:
        n = column_len(batch[names[0]])
        off = 0
        while off < n:
            if not pending and n - off >= rows:
                yield batch if (off, n) == (0, rows) else slice_batch(batch, off, off + rows)
                off += rows
                continue
            take = min(rows - have, n - off)
            pending.append(batch if (off, take) == (0, n) else slice_batch(batch, off, off + take))
            have += take
            off += take
            if have == rows:
                yield _join(spec, names, pending)
                pending, have = [], 0
    if pending:
        yield _join(spec, names, pending)


def group_ranges(
    shards_groups: Iterable[Iterable[tuple[int, int]]], target_bytes: int
) -> list[tuple[int, int]]:
    """Record ranges of a split whose shards are read a group at a time (Parquet row
    groups): whole groups, ``(records, bytes)`` each, gathered to about ``target_bytes``."""
    ranges: list[tuple[int, int]] = []
    first = 0
    for groups in shards_groups:
        start, size = first, 0
        for records, nbytes in groups:
            first += records
            size += nbytes
            if size >= target_bytes:
                ranges.append((start, first))
                start, size = first, 0
        if first > start:
            ranges.append((start, first))
    return ranges


def group_slices(
    group_records: Sequence[int], lo: int, hi: int, rows: int
) -> Iterator[tuple[int, int, int, int]]:
    """``(group, its first record, start, stop)`` for records ``lo:hi`` of a shard whose
    groups hold ``group_records``, at most ``rows`` at a time, touching only the groups
    that hold them (records counted from the shard's start)."""
    first = 0
    for g, n in enumerate(group_records):
        for s in range(max(lo, first), min(hi, first + n), rows):
            yield g, first, s, min(hi, first + n, s + rows)
        first += n
