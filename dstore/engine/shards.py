"""One shard's work, wherever it runs: the records of consecutive shards cut from one
stream, and the task a worker (a process here, or Dask's) runs to read a shard's
records itself and write it."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from ..abc import Reader, Shard, ShardWriter
from ..model.schema import Batch, slice_batch
from ..parallel import prefetch
from ..sharding.processes import report
from .cast import cast_batches
from .dtypes import CastStats, DtypePolicy
from .job import ConvertJob, SourceRef
from .rawsize import RawMeter

__all__ = ["add_measured", "counted_from", "shard_streams", "shard_task", "shard_task_in"]


def _runs(shards: Sequence[Shard]) -> Iterator[list[Shard]]:
    """Consecutive shards of one split whose ranges touch: read as one stream."""
    run: list[Shard] = []
    for s in shards:
        if run and (s.split != run[-1].split or s.start != run[-1].stop):
            yield run
            run = []
        run.append(s)
    if run:
        yield run


def _cut(batches: Iterator[Batch], sizes: Sequence[int]) -> Iterator[Iterator[Batch]]:
    """Split one stream of batches into consecutive sub-streams of ``sizes`` records."""
    carry: list[Batch] = []

    def take(n: int) -> Iterator[Batch]:
        while n > 0:
            batch = carry.pop() if carry else next(batches, None)
            if batch is None:
                return
            m = len(next(iter(batch.values())))
            if m > n:
                # slice_batch: a ragged/string column is values + offsets, not an ndarray
                carry.append(slice_batch(batch, n, m))
                batch = slice_batch(batch, 0, n)
                m = n
            n -= m
            yield batch

    for size in sizes:
        part = take(size)
        yield part
        for _ in part:  # the consumer stopped early: keep the stream aligned
            pass


def shard_streams(
    reader: Reader,
    pending: Sequence[Shard],
    job: ConvertJob,
    stats: dict[str, CastStats],
    ahead: bool,
) -> Iterator[tuple[Shard, Iterator[Batch]]]:
    """Each pending shard with its records, one continuous read per run of
    touching shards (a compressed member cannot seek); ``ahead`` reads the
    next batch in a background thread."""
    for run in _runs(pending):
        stream = cast_batches(
            reader,
            run[0].split,
            job.policy,
            stats,
            start=run[0].start,
            stop=run[-1].stop,
            batch_bytes=job.batch_bytes,
            observe=job.observe,
        )
        yield from zip(
            run, _cut(prefetch(stream) if ahead else stream, [s.records for s in run]), strict=True
        )


def shard_task(
    source: SourceRef,
    writer: ShardWriter,
    root: str,
    shard: Shard,
    policy: DtypePolicy,
    batch_bytes: int,
    batches: list[Batch] | None,
    counted: dict[tuple[str, str], int] | None = None,
    *,
    in_process: bool = False,
) -> tuple[dict[str, Any], dict[str, CastStats], int]:
    """Runs in a worker (Dask's, or a process of :mod:`.processes`): read the shard's
    records (or take them) and write the shard. Returns its manifest entry, the cast
    statistics, and the decoded bytes of its varying-size fields not ``counted`` yet
    (:class:`~dstore.engine.rawsize.RawMeter`).

    Takes the policy and batch size, not the whole job: a task is pickled, and the
    job's progress callback and client belong to the calling process. ``in_process``:
    in a worker process of :mod:`.processes`, which reads the next batch on a thread of
    its own while this one is encoded and reports the records written to its parent as
    they are (:func:`.processes.report`)."""
    stats: dict[str, CastStats] = {}
    if batches is not None:
        return writer.write_shard(root, shard, iter(batches)), stats, 0
    with source.open() as opened:
        meter = RawMeter(opened, counted or {})
        records = cast_batches(
            meter,
            shard.split,
            policy,
            stats,
            start=shard.start,
            stop=shard.stop,
            batch_bytes=batch_bytes,
        )
        # progress only there: a writer on Dask (a test's, a user's) may not take it
        info = (
            writer.write_shard(root, shard, prefetch(records), report)
            if in_process
            else writer.write_shard(root, shard, records)
        )
    return info, stats, meter.measured


def shard_task_in(cwd: str, *task: Any) -> tuple[dict[str, Any], dict[str, CastStats], int]:
    """:func:`shard_task` in the caller's working directory: a worker process kept from
    an earlier conversion started in another (a notebook's ``%cd``), and the source's
    relative paths (the path, a glob, a list's lines) name the caller's files."""
    os.chdir(cwd)
    return shard_task(*task, in_process=True)


def counted_from(reader: Reader, shard: Shard) -> dict[tuple[str, str], int] | None:
    """What the worker writing ``shard`` has left to measure, if ``reader`` measures."""
    return reader.counted_from(shard.split, shard.start) if isinstance(reader, RawMeter) else None


def add_measured(reader: Reader, measured: int) -> None:
    if isinstance(reader, RawMeter):
        reader.measured += measured
