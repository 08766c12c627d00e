"""Shards written on this machine by encoder processes (:mod:`dstore.sharding.processes`):
one shard per worker at a time, the largest first, progress passed on to the parent."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from queue import SimpleQueue
from typing import Any

from ..abc import Codec, Reader, Shard, ShardWriter
from ..errors import CodecIOError
from ..fs import is_url
from ..model.schema import Schema
from ..parallel import default_workers
from ..sharding.processes import EncoderProcesses, discard, encoder_processes, warm_up
from .dtypes import CastStats
from .job import ConvertJob
from .resume import check_unchanged, file_states, remove_unjournaled
from .shards import add_measured, counted_from, shard_task_in

__all__ = ["PROCESS_MIN_RECORDS", "start_workers", "worker_processes", "write_in_processes"]

#: records whose encoding holds the GIL a conversion needs before its shards are written
#: in worker processes: starting them (Python, numpy, dstore, fpng) costs about 0.5 s
#: of CPU each, which only many records repay
PROCESS_MIN_RECORDS = 512


def worker_processes(
    reader: Reader, writer: ShardWriter, shards: Sequence[Shard], job: ConvertJob
) -> EncoderProcesses | None:
    """Worker processes to write ``shards`` in, one shard each at a time; None when
    threads serve as well: the encoders release the GIL (``ShardWriter.gil_bound``), the
    records are few, the source cannot be reopened by range, or this is a worker."""
    if job.client is not None or job.source is None or not reader.random_access:
        return None
    if job.observe is not None:  # convert --check sees the records here, not in children
        return None
    gil_bound = sum(s.records for s in shards if writer.gil_bound(s.split))
    workers = writer.workers or default_workers()
    if gil_bound < PROCESS_MIN_RECORDS or workers < 2:
        return None
    return encoder_processes(workers)


def start_workers(reader: Reader, codec: Codec, schema: Schema, dst: str, job: ConvertJob) -> None:
    """Start the worker processes a sharded conversion of ``schema`` will likely write in
    (:func:`worker_processes`; its raw records span more than a shard), and have them
    import what they run, while this process plans the shards."""
    target = getattr(getattr(codec, "options", None), "shard_mb", 0) * 2**20
    if is_url(dst) or job.resume or schema.nbytes <= target:
        return
    writer = codec.shard_writer(schema, [])
    whole = [Shard(s.name, 0, 0, s.count, "") for s in schema.splits.values()]
    pool = worker_processes(reader, writer, whole, job)
    if pool is not None:
        warm_up(pool, ["dstore.engine.run", type(writer).__module__])


def write_in_processes(
    pool: EncoderProcesses,
    reader: Reader,
    writer: ShardWriter,
    root: str,
    pending: Sequence[Shard],
    job: ConvertJob,
    stats: dict[str, CastStats],
    done: Callable[[Shard, dict[str, Any]], None],
    advance: Callable[[int], None] | None,
) -> None:
    """Each shard written by a worker process that reads the source itself (no records
    pass through this process), the largest first, the next one to the first idle.
    Meanwhile this process checks the source as a whole read would (the CRC-32 of the
    npz members the workers read in parts)."""
    assert job.source is not None
    queue = deque(sorted(pending, key=lambda s: s.records, reverse=True))
    cwd = os.getcwd()
    running: dict[Future[Any], tuple[int, Shard]] = {}
    written: SimpleQueue[int] = SimpleQueue()  # the workers' progress, passed on here

    def start(child: int) -> None:
        if queue:
            shard = queue.popleft()
            # small batches: a worker reads them as it encodes, and two workers' memory
            # stays that of one conversion on threads
            batch_bytes = max(1 << 20, job.batch_bytes // 4)
            task = (job.source, writer, root, shard, job.policy, batch_bytes, None)
            counted = counted_from(reader, shard)
            fut = pool.children[child].submit(shard_task_in, cwd, *task, counted)
            running[fut] = (child, shard)

    def pass_on_progress() -> None:
        while not written.empty():
            n = written.get()
            if advance is not None:
                advance(n)

    counts = {s.split: reader.schema.splits[s.split].count for s in pending}
    in_parts = sorted({s.split for s in pending if s.start > 0 or s.stop < counts[s.split]})
    for worker in pool.children:
        worker.on_report = written.put
    # the workers open the source again by name: a change they would read goes unseen by
    # the CRC-32 this process checks (before they read it) unless the files are compared
    sources_before = file_states(job.sources)
    try:
        for child in range(len(pool)):
            start(child)
        for split in in_parts:  # meanwhile, what the workers' range reads do not check
            reader.check_ranges(split)
        while running:
            finished = wait(running, timeout=0.2, return_when=FIRST_COMPLETED).done
            pass_on_progress()  # a shard's reports come before its answer
            for fut in finished:
                child, shard = running.pop(fut)
                try:
                    info, task_stats, measured = fut.result()
                except RuntimeError as e:  # the process died (killed, out of memory)
                    raise CodecIOError(f"shard {shard.file}: {e}") from None
                CastStats.merge_into(stats, task_stats)
                add_measured(reader, measured)
                done(shard, info)
                start(child)
        check_unchanged(reader, job.sources, sources_before, sorted({s.split for s in pending}))
    except BaseException:
        discard(pool)  # none of its children may go on writing into an output being removed
        # what the stopped workers were writing: a .part, or a shard renamed into place
        # before its journal line (a folder kept for --resume holds journaled shards only)
        remove_unjournaled(root, [shard for _, shard in running.values()])
        raise
    finally:
        for worker in pool.children:
            worker.on_report = None
