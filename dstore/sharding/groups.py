"""Record ranges of shards read a group at a time (Parquet row groups)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

__all__ = ["group_ranges", "group_slices"]


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
