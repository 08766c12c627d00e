"""Shards and zarr regions written as tasks on a Dask distributed cluster: sources that
stream send their records, others are reopened by each task; failures cancel the rest."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..abc import Reader, Shard, ShardWriter
from ..errors import CodecIOError, DstoreError
from ..model.schema import Batch
from .dtypes import CastStats
from .job import ConvertJob, SourceRef
from .shards import add_measured, shard_streams, shard_task

__all__ = ["RegionTasks", "write_on_dask"]


def write_on_dask(
    reader: Reader,
    writer: ShardWriter,
    root: str,
    pending: Sequence[Shard],
    job: ConvertJob,
    stats: dict[str, CastStats],
    done: Callable[[Shard, dict[str, Any]], None],
) -> str:
    """One Dask task per shard (on ``job.client``); workers read the source themselves
    when it allows it."""
    from dask.distributed import as_completed

    client, source, retries = job.client, job.source, job.retries
    streamed = source is None or not reader.random_access
    note = ""
    if streamed:
        note = (
            f"{reader.path}: the source only streams (compressed npz members or in-memory data): "
            "this process reads it and sends each shard's records to the workers"
        )
    token = hashlib.sha256(f"{root}{os.getpid()}".encode()).hexdigest()[:8]
    futures = {}

    def streamed_shards() -> Iterator[tuple[Shard, list[Batch] | None]]:
        if not streamed:
            yield from ((s, None) for s in pending)
            return
        for shard, batches in shard_streams(reader, pending, job, stats, ahead=False):
            yield shard, list(batches)

    def submit(shard: Shard, batches: list[Batch] | None) -> Any:
        data: Any = batches
        if batches is not None:  # sent as data, not inside the task graph
            data = client.scatter([batches], hash=False)[0]
        fut = client.submit(
            shard_task,
            source or SourceRef(reader.path),
            writer,
            root,
            shard,
            job.policy,
            job.batch_bytes,
            data,
            key=f"dstore-{token}-{shard.file}",
            retries=retries,
            pure=False,
        )
        futures[fut] = shard
        return fut

    # Bound what is in flight when this process streams records to the workers.
    window = (
        len(pending)
        if not streamed
        else 2 * max(1, len(client.scheduler_info().get("workers", {})))
    )
    queue = streamed_shards()
    for _ in range(window):
        item = next(queue, None)
        if item is None:
            break
        submit(*item)
    results = as_completed(list(futures))
    try:
        for fut in results:
            shard = futures.pop(fut)
            try:
                info, task_stats, measured = fut.result()
            except DstoreError as e:
                raise type(e)(f"shard {shard.file} failed (after {retries} retries): {e}") from None
            except Exception as e:  # noqa: BLE001 - anything a worker raised, named by shard
                raise CodecIOError(
                    f"shard {shard.file} failed (after {retries} retries): {type(e).__name__}: {e}"
                ) from None
            CastStats.merge_into(stats, task_stats)
            add_measured(reader, measured)
            done(shard, info)
            item = next(queue, None)
            if item is not None:
                results.add(submit(*item))
    finally:
        if futures:  # a shard failed or Ctrl-C: stop the rest before the output is removed
            _cancel_and_drain(client, list(futures), f"dstore-{token}-")
    return note


def _running_here(prefix: str, dask_worker: Any = None) -> int:
    """Runs on a worker: how many of its threads still run a task of this conversion
    (a cancelled task keeps running; Dask only forgets its result)."""
    return sum(1 for ts in dask_worker.state.all_running_tasks if str(ts.key).startswith(prefix))


def _cancel_and_drain(
    client: Any, futures: list[Any], prefix: str, patience: float = 600.0
) -> None:
    """Cancel the tasks and wait until no worker still runs one, so that none
    writes a shard into the temporary output after the caller removed it."""
    import time

    client.cancel(futures)
    deadline = time.monotonic() + patience  # a safety net for a hung task, not a timing
    while time.monotonic() < deadline:
        try:
            running = client.run(_running_here, prefix)
        except Exception:  # noqa: BLE001 - a lost worker writes nothing more
            return
        if not any(running.values()):
            return
        time.sleep(0.05)


class RegionTasks:
    """Chunk-aligned blocks of a single output (a zarr store created at its final
    shape) written as Dask tasks: ``submit`` is the writer's hook
    (:meth:`~dstore.abc.Writer.write_regions`).

    This process reads the source in record order: the stored whole-field sha256 is
    one stream over every record and a ragged field's offsets depend on every record
    before, so both stay here, and so the output's bytes are those of a local run.
    The workers encode and write the chunks; what is in flight is bounded (two
    blocks per worker), so memory stays that of a local run."""

    def __init__(self, client: Any, retries: int = 2) -> None:
        self.client = client
        self.retries = retries
        self.token = (
            f"dstore-region-{hashlib.sha256(f'{id(self)}{os.getpid()}'.encode()).hexdigest()[:8]}-"
        )
        self.window = 2 * max(1, len(client.scheduler_info().get("workers", {})))
        self.futures: list[tuple[Any, str]] = []
        self.count = 0

    def submit(self, function: Callable[..., None], region: Any, start: int, block: Any) -> None:
        where = f"{'/'.join(region.parts)} records {start}:{start + len(block)}"
        data = self.client.scatter([block], hash=False)[0]  # sent as data, not in the graph
        fut = self.client.submit(
            function,
            region,
            start,
            data,
            key=f"{self.token}{self.count}",
            retries=self.retries,
            pure=False,
        )
        self.count += 1
        self.futures.append((fut, where))
        while len(self.futures) > self.window:
            self._wait_first()

    def _wait_first(self) -> None:
        fut, where = self.futures[0]
        try:
            fut.result()
        except DstoreError as e:
            raise type(e)(f"{where} failed (after {self.retries} retries): {e}") from None
        except Exception as e:  # noqa: BLE001 - anything a worker raised, named by block
            raise CodecIOError(
                f"{where} failed (after {self.retries} retries): {type(e).__name__}: {e}"
            ) from None
        self.futures.pop(0)

    def finish(self) -> None:
        """Wait for every block; the first failure raises, naming its array and records."""
        while self.futures:
            self._wait_first()

    def cancel(self) -> None:
        """Stop the blocks still in flight before the caller removes the output."""
        if self.futures:
            _cancel_and_drain(self.client, [f for f, _ in self.futures], self.token)
            self.futures = []
